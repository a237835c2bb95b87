//! Reading a user's input file: only a regular file, and at most the input size limit,
//! one process-wide setting that the `jury` program sets once at startup from its global
//! `--max-input-size` flag (libraries and tests that never set it get
//! [`DEFAULT_MAX_INPUT_SIZE`]).
//!
//! Invariants: nothing is read from a FIFO, device, socket or directory (a FIFO blocks
//! for ever, /dev/zero never ends): the path is checked before it is opened, it is opened
//! without blocking, and the open handle is checked again, so a path swapped in between
//! is refused too; no more than the limit plus one byte is read from any file, so a file
//! that grows while it is read is still bounded. Errors are `std::io::Error`s whose text
//! says what the path is, or its size, the limit and the flag that raises it, so every
//! crate's "FILE: cannot read: ..." error carries them unchanged.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The input size limit unless the program sets another: 4 GiB, far above any judgments,
/// labels or data set file jury reads (a 200,000-judgment CSV is 4.4 MB, the largest data
/// set, Chatbot Arena's `train.csv`, about 180 MB) and the most jury's CSV splitter takes.
pub const DEFAULT_MAX_INPUT_SIZE: u64 = 4 << 30;

/// The flag that raises the limit, as errors name it.
pub const MAX_INPUT_SIZE_FLAG: &str = "--max-input-size";

static MAX_INPUT_SIZE: AtomicU64 = AtomicU64::new(DEFAULT_MAX_INPUT_SIZE);

/// Sets the input size limit, in bytes, for every later read (the program does it once,
/// before any input is read).
pub fn set_max_input_size(bytes: u64) {
    MAX_INPUT_SIZE.store(bytes, Ordering::Relaxed);
}

/// The input size limit in bytes.
pub fn max_input_size() -> u64 {
    MAX_INPUT_SIZE.load(Ordering::Relaxed)
}

/// A size as people write it: a whole or decimal number with an optional unit, `B`, or
/// `K`, `M`, `G`, `T` (also `KB`/`KiB` and so on; every unit a power of 1024). At least
/// one byte.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("`{text}` is not a size (a number of bytes, or with K, M, G or T)")),
    };
    let value: f64 = number.parse().map_err(|_| format!("`{text}` is not a size (a number with K, M, G or T)"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("`{text}`: the size must be at least one byte and below 16 EiB"));
    }
    Ok(bytes as u64)
}

/// A byte count for people: `4 GiB`, `1.5 MiB`, `512 bytes`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = "bytes";
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    if unit == "bytes" || value.fract() == 0.0 { format!("{value} {unit}") } else { format!("{value:.1} {unit}") }
}

/// What a path that is not a regular file is, in words.
fn kind(t: FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

fn not_regular(t: FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}, not a regular file; jury reads only regular files", kind(t)),
    )
}

fn too_large(size: u64, cap: u64) -> io::Error {
    let size = match format_size(size) {
        exact if size < 1024 => exact,
        rounded => format!("{rounded} ({size} bytes)"),
    };
    io::Error::other(format!(
        "{size}, over the input size limit of {}; raise it with {MAX_INPUT_SIZE_FLAG}",
        format_size(cap)
    ))
}

/// Opens `path` for reading if it is a regular file of at most `cap` bytes.
fn open(path: &Path, cap: u64) -> io::Result<File> {
    // Following links, as opening does: a link to a regular file is fine.
    let before = std::fs::metadata(path)?;
    if !before.is_file() {
        return Err(not_regular(before.file_type()));
    }
    // Non-blocking, so a FIFO put in the path's place since the check above cannot hang
    // the open; reads of a regular file ignore the flag.
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    if meta.len() > cap {
        return Err(too_large(meta.len(), cap));
    }
    Ok(file)
}

/// Reads a whole input file: a regular file, at most [`max_input_size`] bytes.
pub fn read_input(path: &Path) -> io::Result<Vec<u8>> {
    read_capped(path, max_input_size())
}

/// [`read_input`] with the limit `cap`.
fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = open(path, cap)?;
    let expected = file.metadata()?.len();
    let mut bytes = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(io::Error::other(format!(
            "grew past the input size limit of {} while being read; raise it with {MAX_INPUT_SIZE_FLAG}",
            format_size(cap)
        )));
    }
    Ok(bytes)
}

/// [`read_input`] as UTF-8 text (an error like `std::fs::read_to_string`'s otherwise).
pub fn read_input_to_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read_input(path)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units_and_print_back() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4 GiB"), Ok(4 << 30));
        assert_eq!(parse_size("1.5m"), Ok(3 << 19));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("2KB"), Ok(2048));
        for bad in ["", "G", "0", "-1", "1.5X", "1e3", "99999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(format_size(4 << 30), "4 GiB");
        assert_eq!(format_size(3 << 19), "1.5 MiB");
        assert_eq!(format_size(100), "100 bytes");
    }

    /// A directory, a device and a FIFO are refused without being opened for reading
    /// (the FIFO, with no writer, would block a plain open for ever); a regular file over
    /// the limit is refused with its size, the limit and the flag, and one that reads on
    /// past its size is cut at the limit.
    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_input(dir.path()).unwrap_err().to_string();
        assert!(e.starts_with("a directory, not a regular file"), "{e}");
        let e = read_input(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.starts_with("a character device, not a regular file"), "{e}");
        let fifo = dir.path().join("pipe.csv");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_input(&fifo).unwrap_err().to_string();
        assert!(e.starts_with("a FIFO (named pipe), not a regular file"), "{e}");

        let file = dir.path().join("big.csv");
        std::fs::write(&file, vec![b'x'; 3000]).unwrap();
        assert_eq!(read_input(&file).unwrap().len(), 3000);
        assert_eq!(read_capped(&file, 3000).unwrap().len(), 3000);
        let e = read_capped(&file, 2048).unwrap_err().to_string();
        assert_eq!(e, "2.9 KiB (3000 bytes), over the input size limit of 2 KiB; raise it with --max-input-size");
        // A file whose size says 0 but that reads on (as a growing file does) stops at
        // the limit plus one byte.
        let e = read_capped(Path::new("/proc/self/maps"), 10).unwrap_err().to_string();
        assert!(e.starts_with("grew past the input size limit of 10 bytes while being read"), "{e}");
    }
}
