use super::*;

#[test]
fn aligned_buffer_is_aligned_and_zeroed() {
    let mut buf = AlignedBuf::new();
    assert!(buf.is_empty());
    buf.resize_zeroed(10_000);
    assert_eq!(buf.as_ptr() as usize % ALIGNMENT, 0);
    assert!(buf.iter().all(|&byte| byte == 0));
    buf[9_999] = 1;
    buf.resize_zeroed(100);
    assert_eq!(buf.len(), 100);
    buf.resize_zeroed(10_000);
    assert_eq!(buf[9_999], 0);
}

#[test]
fn a_gathered_write_of_more_pieces_than_one_call_takes_lands_whole() {
    let dir = tempfile::tempdir().unwrap();
    for io_mode in [IoMode::Fdatasync, IoMode::Dsync] {
        let storage = OsStorage::new(io_mode);
        let path = dir.path().join(format!("log-{io_mode}"));
        let file = storage.create_log(&path, 4 << 20).unwrap();
        assert!(file.gathers());
        // 3000 pieces (three calls at least), some empty, of every small size.
        let owned: Vec<Vec<u8>> =
            (0..3000u32).map(|index| vec![index as u8; (index % 700) as usize]).collect();
        let pieces: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let expected = pieces.concat();
        file.write_gathered_at(&pieces, 8192).unwrap();
        file.sync_data().unwrap();
        let mut back = vec![0u8; expected.len()];
        file.read_at(&mut back, 8192).unwrap();
        assert!(back == expected, "{io_mode}: the gathered write reads back as its pieces");
    }
}

#[test]
fn log_files_are_preallocated_and_replacement_is_whole() {
    let dir = tempfile::tempdir().unwrap();
    let storage = OsStorage::new(IoMode::Fdatasync);
    let path = dir.path().join("log");
    let file = storage.create_log(&path, 3 << 20).unwrap();
    assert_eq!(file.len().unwrap(), 3 << 20);
    assert!(storage.create_log(&path, 4096).is_err(), "create_log never replaces a file");
    file.write_at(b"redo", 4096).unwrap();
    file.sync_data().unwrap();
    let mut back = [0u8; 4];
    file.read_at(&mut back, 4096).unwrap();
    assert_eq!(&back, b"redo");

    let control = dir.path().join("control");
    replace_durably(&storage, &control, b"one").unwrap();
    replace_durably(&storage, &control, b"two!").unwrap();
    assert_eq!(read_all(&storage, &control).unwrap(), b"two!");
    assert!(!storage.exists(&dir.path().join("control.tmp")));
}

#[test]
fn dsync_files_write_and_read() {
    let dir = tempfile::tempdir().unwrap();
    let storage = OsStorage::new(IoMode::Dsync);
    let file = storage.create_log(&dir.path().join("log"), 1 << 20).unwrap();
    file.write_at(&[7u8; 4096], 0).unwrap();
    file.sync_data().unwrap();
    let mut back = [0u8; 4096];
    file.read_at(&mut back, 0).unwrap();
    assert_eq!(back, [7u8; 4096]);
}

/// O_DIRECT takes only aligned memory: a header or a standby's received bytes come from
/// ordinary buffers, and must land all the same (EINVAL before the copy). On a file system
/// that refuses O_DIRECT, `auto` falls back to fdatasync and `direct` says why it fails.
#[test]
fn direct_and_auto_files_take_writes_from_any_memory() {
    let dir = tempfile::tempdir().unwrap();
    for io_mode in [IoMode::Auto, IoMode::Direct] {
        let storage = OsStorage::new(io_mode);
        let path = dir.path().join(format!("log-{io_mode}"));
        let file = match storage.create_log(&path, 4 << 20) {
            Ok(file) => file,
            Err(error) => {
                // Only `direct` may fail, and only where O_DIRECT is refused.
                assert_eq!(io_mode, IoMode::Direct, "{error}");
                assert_eq!(error.kind(), io::ErrorKind::Unsupported, "{error}");
                continue;
            }
        };
        // Memory one byte past an aligned start: never aligned for O_DIRECT.
        let mut backing = AlignedBuf::new();
        backing.resize_zeroed(2 * 4096 + 1);
        backing[1..4097].fill(5);
        let unaligned = &backing[1..4097];
        file.write_at(unaligned, 4096).unwrap();
        let pieces: Vec<&[u8]> = vec![&[1u8; 100][..], &[2u8; 3996][..]];
        file.write_gathered_at(&pieces, 8192).unwrap();
        file.sync_data().unwrap();
        let mut back = vec![0u8; 8192];
        file.read_at(&mut back, 4096).unwrap();
        assert!(back[..4096].iter().all(|&byte| byte == 5), "{io_mode}: the unaligned write");
        assert_eq!(back[4096..8192], pieces.concat()[..], "{io_mode}: the gathered write");
        // A large write (buffered with `auto`), gathered and whole, after the direct ones
        // and before another direct one next to it: all read back once synced.
        let large: Vec<Vec<u8>> = (0..257u32).map(|index| vec![index as u8; 4096]).collect();
        let pieces: Vec<&[u8]> = large.iter().map(Vec::as_slice).collect();
        file.write_gathered_at(&pieces, 3 * 4096).unwrap();
        file.write_at(&pieces.concat()[1..=4096], 3 * 4096 + (257 << 12)).unwrap();
        file.write_at(&vec![9u8; BUFFERED_WRITE_MIN], 3 * 4096 + (258 << 12)).unwrap();
        file.sync_data().unwrap();
        let mut back = vec![0u8; (258 << 12) + BUFFERED_WRITE_MIN];
        file.read_at(&mut back, 3 * 4096).unwrap();
        assert_eq!(back[..257 << 12], pieces.concat()[..], "{io_mode}: the large write");
        assert_eq!(back[257 << 12..258 << 12], pieces.concat()[1..=4096], "{io_mode}");
        assert!(back[258 << 12..].iter().all(|&byte| byte == 9), "{io_mode}: buffered whole");
    }
}

/// With `auto`, a direct write never becomes durable ahead of a buffered one before it:
/// it syncs them first (a closed header after the bytes it closes).
#[test]
fn an_auto_files_direct_write_syncs_the_buffered_ones_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let storage = OsStorage::new(IoMode::Auto);
    let path = dir.path().join("log");
    drop(storage.create_log(&path, 4 << 20).unwrap());
    let file = storage.open_with_mode(&path).unwrap();
    if !file.large_buffered {
        return; // The file system refuses O_DIRECT: nothing is mixed.
    }
    let unsynced = || file.buffered.lock().unsynced;
    assert!(unsynced(), "a process before may have left writes unsynced");
    file.sync_data().unwrap();
    assert!(!unsynced());
    file.write_at(&vec![3u8; BUFFERED_WRITE_MIN], 8192).unwrap();
    assert!(unsynced(), "a large write is buffered");
    let mut header = AlignedBuf::new();
    header.resize_zeroed(4096);
    file.write_at(&header, 0).unwrap();
    assert!(!unsynced(), "synced before the direct write");
    file.write_gathered_at(&[&vec![4u8; BUFFERED_WRITE_MIN][..]], 8192).unwrap();
    file.sync_data().unwrap();
    assert!(!unsynced());
    // A write whose sync comes later (a standby's received redo) is buffered, small too.
    file.write_deferred_at(&header, 4096).unwrap();
    assert!(unsynced(), "a deferred write is buffered");
    file.sync_data().unwrap();
    assert!(!unsynced());
}

/// Which of the first `pages` pages of `file` are in the page cache (`mincore` of a mapping,
/// which itself brings no page in).
fn resident_pages(file: &File, pages: usize) -> Vec<bool> {
    let len = pages * 4096;
    // SAFETY: a read-only shared mapping of `len` bytes of an open file, unmapped below;
    // mincore writes one byte per page of it into `vec`.
    unsafe {
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(file),
            0,
        );
        assert_ne!(map, libc::MAP_FAILED, "{}", io::Error::last_os_error());
        let mut vec = vec![0u8; pages];
        let rc = libc::mincore(map, len, vec.as_mut_ptr());
        let error = io::Error::last_os_error();
        libc::munmap(map, len);
        assert_eq!(rc, 0, "{error}");
        vec.iter().map(|byte| byte & 1 == 1).collect()
    }
}

/// A log member settled after a process died (as recovery does): what that process left in
/// the page cache is made durable and then dropped from it, in every `io_mode`, so that
/// recovery reads what the disk holds (after a failed writeback Linux would keep the unwritten
/// bytes there, clean).
#[test]
fn settling_a_log_member_syncs_what_a_process_before_left_and_reads_from_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    // tmpfs keeps its files in the page cache: nothing there is dropped.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    let c_path = std::ffi::CString::new(dir.path().to_str().unwrap()).unwrap();
    // SAFETY: a valid path and out-pointer.
    assert_eq!(unsafe { libc::statfs(c_path.as_ptr(), &mut stat) }, 0);
    if stat.f_type == libc::TMPFS_MAGIC {
        eprintln!("skipped: tmpfs keeps its files in the page cache");
        return;
    }
    for io_mode in [IoMode::Auto, IoMode::Fdatasync, IoMode::Dsync, IoMode::Direct] {
        let storage = OsStorage::new(io_mode);
        let path = dir.path().join(format!("log-{io_mode}"));
        drop(OsStorage::new(IoMode::Fdatasync).create_log(&path, 1 << 20).unwrap());
        // The process before: buffered writes, never synced.
        let before = OpenOptions::new().write(true).open(&path).unwrap();
        before.write_all_at(&[6u8; 8 * 4096], 4096).unwrap();
        drop(before);
        let probe = File::open(&path).unwrap();
        if !resident_pages(&probe, 9)[1..].iter().all(|&resident| resident) {
            eprintln!("skipped: this file system does not keep written pages in the page cache");
            return;
        }
        let file = match storage.open_with_mode(&path) {
            Ok(file) => file,
            Err(error) if io_mode == IoMode::Direct => {
                assert_eq!(error.kind(), io::ErrorKind::Unsupported, "{error}");
                continue;
            }
            Err(error) => panic!("{io_mode}: {error}"),
        };
        file.settle().unwrap();
        // Dropped, which the kernel does only for pages that are clean: synced.
        assert!(
            resident_pages(&probe, 9).iter().all(|&resident| !resident),
            "{io_mode}: the log member's pages are still cached after its open"
        );
        assert!(!file.buffered.lock().unsynced, "{io_mode}");
        let mut back = vec![0u8; 8 * 4096];
        file.read_at(&mut back, 4096).unwrap();
        assert!(back.iter().all(|&byte| byte == 6), "{io_mode}: read back from the disk");
    }
}

/// A file that records the writebacks started on it.
#[derive(Debug, Default)]
struct Recording {
    started: parking_lot::Mutex<Vec<(u64, u64)>>,
}

impl StorageFile for Recording {
    fn read_at(&self, _buf: &mut [u8], _offset: u64) -> io::Result<()> {
        unreachable!()
    }
    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(0)
    }
    fn set_len(&self, _len: u64) -> io::Result<()> {
        Ok(())
    }
    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        self.started.lock().push((offset, len));
        Ok(())
    }
}

#[test]
fn writeback_starts_every_writeback_after_bytes_over_the_span_they_cover() {
    let file = Recording::default();
    let writeback = Writeback::default();
    let page = 4096u64;
    let pages = WRITEBACK_AFTER / page;
    // Scattered pages, as a checkpoint's copy-on-write writes them: the last one makes
    // WRITEBACK_AFTER bytes.
    for n in 0..pages - 1 {
        writeback.wrote(&file, (10 + (n * 7919) % (4 * pages)) * page, page, WRITEBACK_AFTER);
    }
    assert!(file.started.lock().is_empty(), "started before WRITEBACK_AFTER bytes");
    writeback.wrote(&file, 3 * page, page, WRITEBACK_AFTER);
    let lowest = 3 * page;
    let highest = (0..pages - 1).map(|n| (10 + (n * 7919) % (4 * pages)) * page).max().unwrap();
    assert_eq!(*file.started.lock(), vec![(lowest, highest + page - lowest)]);
    // Counted again from nothing: one more large write starts the next at once, over
    // itself only.
    writeback.wrote(&file, 1 << 40, WRITEBACK_AFTER, WRITEBACK_AFTER);
    // 0: never.
    writeback.wrote(&file, 0, 1 << 30, 0);
    assert_eq!(file.started.lock().len(), 2);
    assert_eq!(file.started.lock()[1], (1 << 40, WRITEBACK_AFTER));
}

#[test]
fn a_started_writeback_succeeds_and_changes_nothing_a_sync_and_a_read_see() {
    let dir = tempfile::tempdir().unwrap();
    let storage = OsStorage::new(IoMode::Fdatasync);
    let file = storage.create(&dir.path().join("data")).unwrap();
    let chunk = vec![9u8; 1 << 20];
    for n in 0..((2 * WRITEBACK_AFTER) >> 20) {
        file.write_at(&chunk, n << 20).unwrap();
    }
    // The real system call, over what was written and over more than the file holds.
    file.start_writeback(0, WRITEBACK_AFTER).unwrap();
    file.start_writeback(WRITEBACK_AFTER, 4 * WRITEBACK_AFTER).unwrap();
    file.sync_data().unwrap();
    assert_eq!(file.len().unwrap(), 2 * WRITEBACK_AFTER);
    let mut back = vec![0u8; 1 << 20];
    file.read_at(&mut back, WRITEBACK_AFTER).unwrap();
    assert_eq!(back, chunk);
    // An O_DSYNC log has nothing to start.
    let storage = OsStorage::new(IoMode::Dsync);
    let log = storage.create_log(&dir.path().join("log"), 1 << 20).unwrap();
    log.write_at(&chunk[..4096], 0).unwrap();
    log.start_writeback(0, 4096).unwrap();
}

/// An archived copy (`create_streamed`) bypasses the page cache where it can, and lands whole
/// from any memory and at any length: a piece the kernel refuses direct (misaligned) goes
/// through the plain descriptor, and one sync makes everything durable. Elsewhere (`fdatasync`
/// mode, or a file system without O_DIRECT) it is an ordinary file.
#[test]
fn a_streamed_copy_is_direct_where_it_can_be_and_lands_whole_from_any_memory() {
    let dir = tempfile::tempdir().unwrap();
    for io_mode in [IoMode::Auto, IoMode::Direct, IoMode::Fdatasync] {
        let storage = OsStorage::new(io_mode);
        let path = dir.path().join(format!("copy-{io_mode}"));
        std::fs::write(&path, vec![0xeeu8; 3 << 20]).unwrap(); // truncated by the create
        let file = storage.create_streamed_file(&path).unwrap();
        if io_mode == IoMode::Fdatasync {
            assert!(!file.direct, "the page cache when the log's I/O mode says so");
        }
        let supports_direct =
            OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(&path).is_ok();
        if io_mode != IoMode::Fdatasync {
            assert_eq!(file.direct, supports_direct, "{io_mode}");
        }
        let mut aligned = AlignedBuf::new();
        aligned.resize_zeroed(1 << 20);
        aligned.fill(1);
        file.write_at(&aligned, 0).unwrap();
        // Unaligned memory, then a length no device block divides.
        let mut backing = AlignedBuf::new();
        backing.resize_zeroed(4097);
        backing[1..].fill(2);
        file.write_at(&backing[1..], 1 << 20).unwrap();
        file.write_at(&[3u8; 100], (1 << 20) + 4096).unwrap();
        file.sync_data().unwrap();
        drop(file);
        let back = std::fs::read(&path).unwrap();
        assert_eq!(back.len(), (1 << 20) + 4096 + 100, "{io_mode}");
        assert!(back[..1 << 20].iter().all(|&byte| byte == 1), "{io_mode}");
        assert!(back[1 << 20..(1 << 20) + 4096].iter().all(|&byte| byte == 2), "{io_mode}");
        assert!(back[(1 << 20) + 4096..].iter().all(|&byte| byte == 3), "{io_mode}");
    }
}
