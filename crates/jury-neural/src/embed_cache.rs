//! Frozen-encoder embeddings on disk: a data set's contexts are embedded once per
//! encoder and setting, and a run killed while embedding resumes where it stopped.
//!
//! Invariants: a file's key covers the encoder weights' sha256, [`ENCODER_REVISION`],
//! `max_tokens`, the pooling and every text in order; a complete matrix is published atomically as
//! `KEY.f32`, so a reader sees it whole or not at all; a file holding a non-finite
//! value was damaged after it was written and is embedded again.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::{ComputeDevice, ENCODER_REVISION, Encoder, NeuralError, Note, Pooling};

/// Texts embedded between two appends to the partial file: what a crash can lose.
const EMBED_CHUNK: usize = 1024;

/// Texts per encoder batch.
const EMBED_BATCH: usize = 32;

/// What an embedding depends on besides its text, and where the files go.
pub(crate) struct EmbedSetup<'a> {
    pub(crate) encoder_dir: &'a Path,
    pub(crate) device: ComputeDevice,
    pub(crate) max_tokens: usize,
    pub(crate) pooling: Pooling,
    /// The folder of `KEY.f32` and `KEY.partial` files.
    pub(crate) dir: PathBuf,
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> NeuralError {
    let path = path.to_owned();
    move |source| NeuralError::Io { action, path, source }
}

/// Frozen embeddings of `ordered` (row-major, `hidden` per text), from the disk cache
/// when present.
///
/// Resumable: finished rows are appended to `KEY.partial` (records of a u32 text index
/// and `hidden` f32s, little-endian) every `EMBED_CHUNK` texts; a run killed mid-way
/// embeds only the rows missing from it. The complete matrix is then written atomically
/// to `KEY.f32` and the partial file removed.
pub(crate) fn embed_cached(
    ordered: &[&str],
    setup: &EmbedSetup,
    note: &dyn Fn(&Note),
) -> Result<(Vec<f32>, usize), NeuralError> {
    let model_sha = jury_cache::file_sha256(&setup.encoder_dir.join("model.safetensors"))?;
    let mt = setup.max_tokens.to_le_bytes();
    let mut parts: Vec<&[u8]> = vec![model_sha.as_bytes(), b"max_tokens", &mt, ENCODER_REVISION.as_bytes()];
    // Unit-length rows were the only pooling once: their keys stay as they were.
    if setup.pooling == Pooling::AsDefined {
        parts.push(b"pooling=as-defined");
    }
    for t in ordered {
        parts.push(t.as_bytes());
        parts.push(b"\0");
    }
    let key = jury_cache::key(&parts);
    let file = setup.dir.join(format!("{key}.f32"));
    let encoder = Encoder::load_on(setup.encoder_dir, setup.device.open()?)?;
    let h = encoder.hidden_size();
    if let Ok(bytes) = std::fs::read(&file)
        && bytes.len() == ordered.len() * h * 4
    {
        let v: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        if v.iter().all(|x| x.is_finite()) {
            return Ok((v, h));
        }
        note(&Note::EmbeddingsDamaged { path: &file });
    }
    std::fs::create_dir_all(&setup.dir).map_err(io_error("creating embedding cache", &setup.dir))?;
    let partial = setup.dir.join(format!("{key}.partial"));
    let mut rows: Vec<Option<Vec<f32>>> = vec![None; ordered.len()];
    let done = read_partial(&partial, h, &mut rows)?;
    if done > 0 {
        note(&Note::EmbeddingResumed { done, total: ordered.len(), path: &partial });
    }
    let todo: Vec<usize> = (0..ordered.len()).filter(|&i| rows[i].is_none()).collect();
    let progress = jury_progress::Progress::new(
        "embedding contexts",
        ordered.len() as u64,
        "embedding contexts {bar:30} {pos}/{len} {per_sec} ETA {eta}",
    );
    progress.skip(done as u64);
    let mut out =
        std::fs::OpenOptions::new().create(true).append(true).open(&partial).map_err(io_error("opening", &partial))?;
    for chunk in todo.chunks(EMBED_CHUNK) {
        let texts: Vec<&str> = chunk.iter().map(|&i| ordered[i]).collect();
        let x: Vec<Vec<f32>> = encoder
            .embed_pooled(&texts, setup.max_tokens, EMBED_BATCH, setup.pooling, |n| progress.inc(n as u64))?
            .to_vec2()?;
        let mut record = Vec::with_capacity(chunk.len() * (4 + 4 * h));
        for (&i, row) in chunk.iter().zip(&x) {
            record.extend_from_slice(&(i as u32).to_le_bytes());
            record.extend(row.iter().flat_map(|f| f.to_le_bytes()));
        }
        out.write_all(&record).and_then(|()| out.flush()).map_err(io_error("appending to", &partial))?;
        for (&i, row) in chunk.iter().zip(x) {
            rows[i] = Some(row);
        }
    }
    progress.finish();
    let flat: Vec<f32> = rows.into_iter().flat_map(Option::unwrap_or_default).collect();
    if flat.len() != ordered.len() * h {
        return Err(NeuralError::File { path: partial, reason: "embedding rows missing after the run".into() });
    }
    let bytes: Vec<u8> = flat.iter().flat_map(|f| f.to_le_bytes()).collect();
    jury_io::write_atomic(&file, &bytes)?;
    std::fs::remove_file(&partial).map_err(io_error("removing", &partial))?;
    Ok((flat, h))
}

/// Fills `rows` from a partial embedding file (absent: nothing done); a record cut short
/// by a crash is ignored. Returns how many rows it filled.
fn read_partial(path: &Path, h: usize, rows: &mut [Option<Vec<f32>>]) -> Result<usize, NeuralError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_error("reading", path)(e)),
    };
    let mut filled = 0;
    for rec in bytes.chunks_exact(4 + 4 * h) {
        let i = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]) as usize;
        let Some(slot) = rows.get_mut(i) else {
            return Err(NeuralError::File {
                path: path.to_owned(),
                reason: format!("row index {i} out of range ({} texts); delete the file", rows.len()),
            });
        };
        if slot.is_none() {
            filled += 1;
        }
        *slot = Some(rec[4..].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect());
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partial file's records fill their rows, a record cut short by a crash is
    /// ignored, and an index beyond the texts names the file.
    #[test]
    fn partial_records_fill_rows_and_torn_ones_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.partial");
        let record = |i: u32, x: [f32; 2]| {
            let mut r = i.to_le_bytes().to_vec();
            x.iter().for_each(|f| r.extend(f.to_le_bytes()));
            r
        };
        let mut bytes = record(2, [1.0, 2.0]);
        bytes.extend(record(0, [3.0, 4.0]));
        bytes.extend(&record(1, [5.0, 6.0])[..7]);
        std::fs::write(&path, &bytes).unwrap();
        let mut rows = vec![None; 3];
        assert_eq!(read_partial(&path, 2, &mut rows).unwrap(), 2);
        assert_eq!(rows, vec![Some(vec![3.0, 4.0]), None, Some(vec![1.0, 2.0])]);
        assert_eq!(read_partial(&dir.path().join("absent"), 2, &mut rows).unwrap(), 0);
        std::fs::write(&path, record(9, [0.0, 0.0])).unwrap();
        let err = read_partial(&path, 2, &mut rows).unwrap_err().to_string();
        assert!(err.contains("k.partial") && err.contains("row index 9"), "{err}");
    }
}
