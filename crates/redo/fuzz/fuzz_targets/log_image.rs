//! Any bytes as a whole log file or archived log: the scan never panics, and what it
//! returns is self-consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redo::format::scan_image;

fuzz_target!(|data: &[u8]| {
    if let Ok(scan) = scan_image(data) {
        assert!(scan.end_offset <= data.len() as u64);
        for (index, record) in scan.records.iter().enumerate() {
            assert_eq!(record.scn.0, scan.header.first_scn.0 + index as u64);
        }
        assert_eq!(scan.end_scn.0, scan.header.first_scn.0 + scan.records.len() as u64);
    }
});
