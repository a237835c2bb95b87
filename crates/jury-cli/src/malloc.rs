//! glibc's allocator tuned for the encoder's large, short-lived tensors.
//!
//! By default glibc serves blocks above 128 KiB (a threshold that adapts upward only
//! to 32 MiB) with `mmap`, and returns them and the top of the heap to the kernel when
//! freed; every MiniLM batch then pays for fresh zeroed pages again (page faults and
//! clearing were a fifth of the embedding time). Keeping blocks up to 32 MiB on the heap
//! and never trimming it trades a larger resident set for that time: measured in
//! docs/benchmarks/encoders.md ("Frozen encoder: embedding rate").

/// The largest block kept on the heap (larger ones are still mapped and unmapped).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 32 << 20;

/// Sets the thresholds; called once, first thing in `main`.
pub(crate) fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes glibc's thresholds; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
    }
}
