//! Embeddings computed in mc's own process: a static model, one vector per
//! token of its vocabulary, mean-pooled over a text's tokens and scaled to
//! unit length. No runtime library, no server: a `tokenizer.json` (read by
//! the `tokenizers` crate) and one 2-D tensor in a `model.safetensors`.
//!
//! The models mc knows are listed in [`MODELS`] with the size and SHA-256
//! of each file; a model is used only when both files are there with that
//! size and checksum (checked once per process, at the first embedding; a
//! file whose size and modification time are those of its last check, as
//! the folder's `verified` stamp records them, is not hashed again). The
//! token table stays in its stored precision (f16: 16 MB), a row widened to
//! f32 only when a token is looked up.

use std::fmt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The tokenizer file of a model folder.
pub const TOKENIZER: &str = "tokenizer.json";
/// The weights file of a model folder.
pub const WEIGHTS: &str = "model.safetensors";
/// What the last full check of a folder's files saw (name, size,
/// modification time, SHA-256, a line each).
pub const STAMP: &str = "verified";

/// One file of a model: its name in the folder, where it is downloaded
/// from (relative to the model's `base_url`), its size and SHA-256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFile {
    pub name: &'static str,
    pub remote: &'static str,
    pub size: u64,
    pub sha256: &'static str,
}

/// A model mc can fetch and run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// The name after `local:` in `embeddings.model`, and the folder's name.
    pub name: &'static str,
    /// Where its files are downloaded from.
    pub base_url: &'static str,
    pub files: [ModelFile; 2],
    pub dimensions: usize,
    pub license: &'static str,
}

/// WordLlama l2_supercat at 256 dimensions (MIT): token embeddings of the
/// Llama 2 vocabulary, 32,000 × 256 in f16. The same two files ship inside
/// the `wordllama` wheel on PyPI, which is how tests and CI get them.
pub const WORDLLAMA_L2_256: Spec = Spec {
    name: "wordllama-l2-supercat-256",
    base_url: "https://huggingface.co/dleemiller/word-llama-l2-supercat/resolve/main",
    files: [
        ModelFile {
            name: TOKENIZER,
            remote: "l2_supercat_tokenizer_config.json",
            size: 1_842_796,
            sha256: "93248f2a9ec36c7b35f700a033d5f36228aae48db61aee31007fa49062cdeb68",
        },
        ModelFile {
            name: WEIGHTS,
            remote: "l2_supercat_256.safetensors",
            size: 16_384_096,
            sha256: "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5",
        },
    ],
    dimensions: 256,
    license: "MIT",
};

/// Every model `embeddings.model = "local:<name>"` may name.
pub const MODELS: &[Spec] = &[WORDLLAMA_L2_256];

/// The model named `name` (without `local:`).
pub fn spec(name: &str) -> Option<&'static Spec> {
    MODELS.iter().find(|s| s.name == name)
}

/// What a model folder holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Both files, of the right size and checksum.
    Ready,
    /// No file of it at all (never fetched).
    Missing,
    /// Some file is missing, cut short or not the expected one.
    Broken(String),
}

/// Whether any file of `spec` is in `dir` (a look, nothing read).
pub fn fetched(dir: &Path, spec: &Spec) -> bool {
    spec.files.iter().any(|f| dir.join(f.name).exists())
}

/// Check the files of `spec` in `dir`: sizes first, then checksums.
pub fn check(dir: &Path, spec: &Spec) -> State {
    if !fetched(dir, spec) {
        return State::Missing;
    }
    for file in &spec.files {
        if let Err(why) = verify_file(&dir.join(file.name), file) {
            return State::Broken(why);
        }
    }
    State::Ready
}

/// [`check`], without hashing a file again whose size and modification
/// time are the ones the folder's [`STAMP`] recorded when it last passed;
/// a folder that passes gets its stamp written (best effort).
pub fn check_cached(dir: &Path, spec: &Spec) -> State {
    let expected = stamp(dir, spec);
    if let Some(expected) = &expected
        && std::fs::read_to_string(dir.join(STAMP)).is_ok_and(|s| &s == expected)
    {
        return State::Ready;
    }
    let state = check(dir, spec);
    if state == State::Ready
        && let Some(expected) = expected
    {
        let _ = std::fs::write(dir.join(STAMP), expected);
    }
    state
}

/// The stamp of `dir`'s files as they are now (None: one cannot be read).
fn stamp(dir: &Path, spec: &Spec) -> Option<String> {
    let mut out = String::new();
    for file in &spec.files {
        let meta = std::fs::symlink_metadata(dir.join(file.name)).ok()?;
        let modified = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        if !meta.is_file() || meta.len() != file.size {
            return None;
        }
        out.push_str(&format!(
            "{} {} {modified} {}\n",
            file.name, file.size, file.sha256
        ));
    }
    Some(out)
}

/// `path` has `file`'s size and SHA-256, or why not.
pub fn verify_file(path: &Path, file: &ModelFile) -> Result<(), String> {
    let shown = path.display();
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    if meta.len() != file.size {
        return Err(format!(
            "{shown} is {} bytes, not {} (cut short or another file)",
            meta.len(),
            file.size
        ));
    }
    let digest = sha256_file(path).map_err(|e| format!("{shown}: {e}"))?;
    if digest != file.sha256 {
        return Err(format!(
            "{shown} has SHA-256 {digest}, not {} (corrupt or another file)",
            file.sha256
        ));
    }
    Ok(())
}

/// The SHA-256 of a file, in lowercase hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(buffer.get(..n).unwrap_or_default());
    }
    Ok(hex(&hasher.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A loaded static model: a tokenizer and a table of `rows × dimensions`.
pub struct StaticModel {
    tokenizer: tokenizers::Tokenizer,
    table: Table,
    rows: usize,
    dimensions: usize,
}

/// The token table in its stored precision (f16 as stored; f32 and bf16
/// widened to f32).
enum Table {
    Half(Vec<half::f16>),
    Full(Vec<f32>),
}

impl fmt::Debug for StaticModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StaticModel({} × {})", self.rows, self.dimensions)
    }
}

impl StaticModel {
    /// Load `spec` from `dir` after checking its files.
    pub fn load(dir: &Path, spec: &Spec) -> Result<StaticModel, String> {
        match check_cached(dir, spec) {
            State::Ready => {}
            State::Missing => {
                return Err(format!(
                    "the local model {} is not set up in {} (run `mc-doctor setup` or \
                     `mc-search index --embeddings`)",
                    spec.name,
                    dir.display()
                ));
            }
            State::Broken(why) => {
                return Err(format!(
                    "the local model {} is damaged: {why} (run `mc-doctor setup` to fetch it again)",
                    spec.name
                ));
            }
        }
        let model = StaticModel::from_files(&dir.join(TOKENIZER), &dir.join(WEIGHTS))?;
        if model.dimensions != spec.dimensions {
            return Err(format!(
                "the local model {} has {} dimensions, not {}",
                spec.name, model.dimensions, spec.dimensions
            ));
        }
        Ok(model)
    }

    /// Load a tokenizer and a weights file, unchecked: the weights' one
    /// 2-D tensor (f32, f16 or bf16) is the token table.
    pub fn from_files(tokenizer: &Path, weights: &Path) -> Result<StaticModel, String> {
        let tokenizer = read_tokenizer(tokenizer)?;
        let (table, rows, dimensions) = read_table(weights)?;
        Ok(StaticModel {
            tokenizer,
            table,
            rows,
            dimensions,
        })
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// The unit-length vector of each text (all zeros for a text with no
    /// token).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        texts.iter().map(|t| self.embed_one(t)).collect()
    }

    fn embed_one(&self, text: &str) -> Result<Vec<f32>, String> {
        let encoding = self
            .tokenizer
            .encode_fast(text, false)
            .map_err(|e| format!("tokenizing: {e}"))?;
        let d = self.dimensions;
        let mut sum = vec![0.0f32; d];
        let mut row = vec![0.0f32; d];
        for id in encoding.get_ids() {
            // Ids past the table (added tokens) take its last row, as the model's own code does.
            let start = (*id as usize).min(self.rows.saturating_sub(1)) * d;
            let values: &[f32] = match &self.table {
                Table::Half(t) => match t.get(start..start + d) {
                    Some(halves) => {
                        half::slice::HalfFloatSliceExt::convert_to_f32_slice(halves, &mut row);
                        &row
                    }
                    None => continue,
                },
                Table::Full(t) => match t.get(start..start + d) {
                    Some(values) => values,
                    None => continue,
                },
            };
            for (s, v) in sum.iter_mut().zip(values) {
                *s += v;
            }
        }
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            for s in &mut sum {
                *s /= norm;
            }
        }
        Ok(sum)
    }
}

/// A `tokenizer.json`.
pub fn read_tokenizer(path: &Path) -> Result<tokenizers::Tokenizer, String> {
    tokenizers::Tokenizer::from_file(path)
        .map_err(|e| format!("{}: not a tokenizer ({e})", path.display()))
}

/// The token table of a weights file: its one 2-D tensor, with its rows
/// and dimensions.
fn read_table(path: &Path) -> Result<(Table, usize, usize), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    token_table(&bytes).map_err(|e| format!("{}: not a static model ({e})", path.display()))
}

/// Time [`read_tokenizer`] and reading the weights of `dir` apart (the
/// benchmark's breakdown of a load).
pub fn read_files(dir: &Path) -> Result<(), String> {
    read_tokenizer(&dir.join(TOKENIZER))?;
    read_table(&dir.join(WEIGHTS)).map(|_| ())
}

/// The one 2-D tensor of a safetensors file.
fn token_table(bytes: &[u8]) -> Result<(Table, usize, usize), String> {
    use safetensors::Dtype;
    let tensors = safetensors::SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
    let mut matrices: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .tensors()
        .into_iter()
        .filter(|(_, t)| t.shape().len() == 2)
        .collect();
    if matrices.len() != 1 {
        return Err(format!(
            "{} two-dimensional tensors, where one token table was expected",
            matrices.len()
        ));
    }
    let Some((_, view)) = matrices.pop() else {
        return Err("no tensor".into());
    };
    let (rows, dimensions) = match view.shape() {
        [r, d] if *r > 0 && *d > 0 => (*r, *d),
        other => return Err(format!("a tensor of shape {other:?}")),
    };
    let data = view.data();
    let table = match view.dtype() {
        Dtype::F32 => Table::Full(
            data.chunks_exact(4)
                .filter_map(|c| <[u8; 4]>::try_from(c).ok().map(f32::from_le_bytes))
                .collect(),
        ),
        Dtype::F16 => Table::Half(
            data.chunks_exact(2)
                .filter_map(|c| <[u8; 2]>::try_from(c).ok())
                .map(half::f16::from_le_bytes)
                .collect(),
        ),
        Dtype::BF16 => Table::Full(
            data.chunks_exact(2)
                .filter_map(|c| <[u8; 2]>::try_from(c).ok())
                .map(|c| half::bf16::from_le_bytes(c).to_f32())
                .collect(),
        ),
        other => return Err(format!("tensor type {other:?} (f32, f16 or bf16 expected)")),
    };
    let (len, finite) = match &table {
        Table::Half(t) => (t.len(), t.iter().all(|x| x.is_finite())),
        Table::Full(t) => (t.len(), t.iter().all(|x| x.is_finite())),
    };
    if len != rows * dimensions || !finite {
        return Err("a token table of the wrong length or with non-numbers".into());
    }
    Ok((table, rows, dimensions))
}

/// The folder of model `name` under the models folder.
pub fn model_dir(models: &Path, name: &str) -> PathBuf {
    models.join(name)
}

#[cfg(test)]
mod tests;
