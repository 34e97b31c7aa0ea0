//! Any bytes as the archive catalog file: opening it never panics, keeps the whole entries
//! at the front and cuts the rest.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use redo::catalog::ArchiveCatalog;
use redo::crashdisk::CrashDisk;
use redo::storage::Storage;

fuzz_target!(|data: &[u8]| {
    let disk = CrashDisk::new();
    disk.create_dir_all(Path::new("/r")).unwrap();
    let path = Path::new("/r/archive_catalog");
    let file = disk.create(path).unwrap();
    file.write_at(data, 0).unwrap();
    if let Ok(catalog) = ArchiveCatalog::open(&disk, path) {
        let kept = disk.contents(path).unwrap();
        assert!(kept.len() <= data.len());
        assert_eq!(&data[..kept.len()], &kept[..]);
        let entries = catalog.entries();
        let reopened = ArchiveCatalog::open(&disk, path).unwrap();
        assert_eq!(reopened.entries(), entries);
    }
});
