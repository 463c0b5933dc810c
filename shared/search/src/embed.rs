//! Embeddings for hybrid search, from one of two backends: a static model
//! run in mc's own process (`embeddings.model = "local:<name>"`, the
//! default, used once its files are fetched; see [`local`] and [`fetch`]),
//! or an OpenAI-compatible `/embeddings` endpoint (`provider/model`, a
//! provider of kind `openai`). Vectors are kept as BLOBs keyed by the
//! SHA-256 of the text they embed (so the same text is never embedded
//! twice, and a changed text gets a new vector), and per project in a
//! vector index ([`vectors`]) the backfill writes; a query's vector
//! re-ranks the full-text candidates and adds the nearest items the words
//! did not find, by a weighted reciprocal rank fusion ([`Fusion`]).
//!
//! A model that is missing or damaged, an endpoint that is down, slow,
//! answers garbage, another model or another vector length never breaks a
//! search: it falls back to full text and says why. A backfill (`mc-search
//! index --embeddings`) refuses such answers and stores nothing of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use mc_base::config::{Config, ProviderKind};
use mc_base::error::{Error, Result};
use mc_base::store::Store;

pub mod fetch;
pub mod local;
pub mod vectors;

/// The most bytes of one item that are embedded (its head: what it is about).
pub const MAX_TEXT_BYTES: usize = 4 * 1024;
/// Reciprocal rank fusion's constant: how flat the fused ranks are (the
/// usual 60; the benchmark's QA set does no better with 10 or 30).
pub const RRF_K: f64 = 60.0;
/// The largest answer read from the endpoint.
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;
/// The first wait before a retry (doubled each time).
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// What `embeddings.model` names with this prefix is a local model.
pub const LOCAL_PREFIX: &str = "local:";

/// A configured embeddings model.
#[derive(Debug, Clone)]
pub struct Provider {
    /// `embeddings.model` as configured: the name vectors are stored under.
    pub name: String,
    pub backend: Backend,
    /// The vector length the config demands (None: learned).
    pub dimensions: Option<usize>,
    pub batch_size: usize,
    pub timeout: Duration,
    pub query_timeout: Duration,
    pub retries: u32,
    /// The vector index as this process loaded it (shared by clones).
    pub index: vectors::Cache,
}

/// Where vectors come from.
#[derive(Debug, Clone)]
pub enum Backend {
    /// An OpenAI-compatible endpoint.
    Endpoint {
        /// `<base_url>/embeddings`.
        url: String,
        /// The model id sent (the part after `provider/`).
        model: String,
        key: Option<String>,
        connect_timeout: Duration,
    },
    /// A static model in this process, loaded at its first use.
    Local(Arc<LocalModel>),
}

/// A local model's folder, and the model once loaded (or why it cannot be).
#[derive(Debug)]
pub struct LocalModel {
    pub spec: &'static local::Spec,
    pub dir: PathBuf,
    loaded: OnceLock<std::result::Result<local::StaticModel, String>>,
}

impl LocalModel {
    pub fn new(spec: &'static local::Spec, dir: PathBuf) -> LocalModel {
        LocalModel {
            spec,
            dir,
            loaded: OnceLock::new(),
        }
    }

    /// The model, loaded and checked once per process.
    pub fn model(&self) -> std::result::Result<&local::StaticModel, String> {
        self.loaded
            .get_or_init(|| local::StaticModel::load(&self.dir, self.spec))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// What its folder holds (checked now, not cached).
    pub fn state(&self) -> local::State {
        local::check(&self.dir, self.spec)
    }
}

impl Provider {
    /// The model `embeddings.model` names (None when it is unset). `env`
    /// reads an environment variable (the binary's business); `models` is
    /// the folder local models live in (see `mc_base::paths::models_dir`).
    pub fn from_config(
        config: &Config,
        env: &dyn Fn(&str) -> Option<String>,
        models: Option<&Path>,
    ) -> Result<Option<Provider>> {
        let Some(name) = config.embeddings.model.clone() else {
            return Ok(None);
        };
        let e = &config.embeddings;
        let provider = |backend: Backend, dimensions: Option<usize>| Provider {
            name: name.clone(),
            backend,
            dimensions,
            batch_size: e.batch_size.max(1) as usize,
            timeout: Duration::from_millis(e.timeout_ms),
            query_timeout: Duration::from_millis(e.query_timeout_ms),
            retries: e.retries,
            index: vectors::Cache::default(),
        };
        if let Some(local_name) = name.strip_prefix(LOCAL_PREFIX) {
            let spec = local::spec(local_name).ok_or_else(|| {
                let known: Vec<String> = local::MODELS
                    .iter()
                    .map(|m| format!("{LOCAL_PREFIX}{}", m.name))
                    .collect();
                Error::input(format!(
                    "embeddings.model {name:?} is no local model mc knows"
                ))
                .with_hint(format!("use one of {}", known.join(", ")))
            })?;
            let models = models.ok_or_else(|| {
                Error::Config(
                    "no cache folder for local models: none of XDG_CACHE_HOME, HOME".into(),
                )
                .with_hint("set XDG_CACHE_HOME or HOME")
            })?;
            let dir = local::model_dir(models, spec.name);
            return Ok(Some(provider(
                Backend::Local(Arc::new(LocalModel::new(spec, dir))),
                Some(spec.dimensions),
            )));
        }
        let Some((provider_name, model)) = name.split_once('/') else {
            return Err(Error::input(format!(
                "embeddings.model {name:?} is not of the form \"provider/model\" or \"local:<name>\""
            )));
        };
        let entry = config.providers.get(provider_name).ok_or_else(|| {
            Error::input(format!(
                "embeddings.model names provider {provider_name:?}, which \"providers\" does not define"
            ))
            .with_hint(
                "add it to \"providers\" in the user config: {\"kind\": \"openai\", \
                 \"base_url\": \"http://127.0.0.1:8080/v1\"}",
            )
        })?;
        if entry.kind != ProviderKind::Openai {
            return Err(Error::input(format!(
                "embeddings.model names provider {provider_name:?} of kind {}; embeddings need an \
                 OpenAI-compatible provider (kind \"openai\")",
                entry.kind.as_str()
            )));
        }
        let base = entry.effective_base_url().unwrap_or_default();
        let key = entry.api_key_env.as_deref().and_then(env);
        Ok(Some(provider(
            Backend::Endpoint {
                url: format!("{}/embeddings", base.trim_end_matches('/')),
                model: model.to_string(),
                key,
                connect_timeout: Duration::from_millis(e.timeout_ms.min(10_000)),
            },
            (e.dimensions > 0).then_some(e.dimensions as usize),
        )))
    }

    /// The model a search ranks with: None when none is configured, or when
    /// it is a local model never fetched (full text, as before setup,
    /// without a warning: `mc-doctor` says how to set it up). A model
    /// whose files are there but damaged is kept: its search warns. Only
    /// looks whether the files are there (nothing is read or loaded: the
    /// model loads at the first query that needs a vector).
    pub fn for_search(
        config: &Config,
        env: &dyn Fn(&str) -> Option<String>,
        models: Option<&Path>,
    ) -> Option<std::result::Result<Provider, String>> {
        match Provider::from_config(config, env, models) {
            Ok(Some(p)) if p.local().is_some_and(|m| !local::fetched(&m.dir, m.spec)) => None,
            Ok(p) => p.map(Ok),
            Err(e) => Some(Err(e.to_string())),
        }
    }

    /// The local model, when it is one.
    pub fn local(&self) -> Option<&LocalModel> {
        match &self.backend {
            Backend::Local(m) => Some(m),
            Backend::Endpoint { .. } => None,
        }
    }

    /// Where its vectors come from, as a message names it.
    pub fn place(&self) -> String {
        match &self.backend {
            Backend::Endpoint { url, .. } => url.clone(),
            Backend::Local(m) => m.dir.display().to_string(),
        }
    }

    /// The vector length answers must have: the configured one, else the
    /// one recorded with this model's first stored vectors.
    pub fn expected_dimensions(&self, conn: &Connection) -> Result<Option<usize>> {
        if let Some(d) = self.dimensions {
            return Ok(Some(d));
        }
        Ok(recorded_dimensions(conn, &self.name)?)
    }

    /// The vectors of `texts`, in order, unit length. Refused (nothing
    /// returned) when the answer is not one vector per text of one length,
    /// is of another model, or of another length than `expected`.
    pub fn embed(
        &self,
        texts: &[&str],
        expected: Option<usize>,
        timeout: Duration,
    ) -> std::result::Result<Vec<Vec<f32>>, Fault> {
        match &self.backend {
            Backend::Local(m) => {
                let model = m.model().map_err(Fault::Local)?;
                if let Some(want) = expected
                    && want != model.dimensions()
                {
                    return Err(Fault::WrongDimension {
                        expected: want,
                        answered: model.dimensions(),
                    });
                }
                model.embed(texts).map_err(Fault::Local)
            }
            Backend::Endpoint {
                url,
                model,
                key,
                connect_timeout,
            } => embed_remote(
                url,
                model,
                key.as_deref(),
                (*connect_timeout).min(timeout),
                texts,
                expected,
                timeout,
            ),
        }
    }
}

/// One request to an endpoint.
fn embed_remote(
    url: &str,
    model: &str,
    key: Option<&str>,
    connect_timeout: Duration,
    texts: &[&str],
    expected: Option<usize>,
    timeout: Duration,
) -> std::result::Result<Vec<Vec<f32>>, Fault> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(connect_timeout))
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .user_agent(concat!("mc/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let body = json!({"model": model, "input": texts, "encoding_format": "float"});
    let mut request = agent.post(url).header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let mut response = request
        .send(body.to_string().as_bytes())
        .map_err(transport)?;
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_string()
        .map_err(transport)?;
    if !(200..300).contains(&status) {
        return Err(Fault::Status(status, excerpt(&text)));
    }
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Fault::Garbage(format!("not JSON ({e}): {}", excerpt(&text))))?;
    parse_answer(&value, model, texts.len(), expected)
}

/// Why an embeddings request gave nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    Unreachable(String),
    Timeout,
    Status(u16, String),
    Garbage(String),
    WrongModel {
        asked: String,
        answered: String,
    },
    WrongDimension {
        expected: usize,
        answered: usize,
    },
    /// The local model cannot be used (missing, damaged, not loadable).
    Local(String),
}

impl Fault {
    /// Worth another try: the endpoint was busy, down or slow.
    pub fn retryable(&self) -> bool {
        match self {
            Fault::Unreachable(_) | Fault::Timeout => true,
            Fault::Status(s, _) => *s == 429 || *s >= 500,
            _ => false,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Unreachable(e) => write!(f, "the endpoint cannot be reached ({e})"),
            Fault::Timeout => write!(f, "the endpoint did not answer in time"),
            Fault::Status(s, body) => write!(f, "the endpoint answered HTTP {s}: {body}"),
            Fault::Garbage(e) => write!(f, "the endpoint's answer is not embeddings: {e}"),
            Fault::WrongModel { asked, answered } => write!(
                f,
                "the endpoint answered with model {answered:?}, not {asked:?}: refused"
            ),
            Fault::WrongDimension { expected, answered } => write!(
                f,
                "the model gives vectors of {answered} numbers, not {expected}: refused"
            ),
            Fault::Local(why) => f.write_str(why),
        }
    }
}

fn transport(e: ureq::Error) -> Fault {
    match e {
        ureq::Error::Timeout(_) => Fault::Timeout,
        ureq::Error::BodyExceedsLimit(n) => Fault::Garbage(format!("an answer over {n} bytes")),
        other => Fault::Unreachable(other.to_string()),
    }
}

fn excerpt(text: &str) -> String {
    super::preview(text, 200)
}

/// Check an `/embeddings` answer and take its vectors (unit length, in the
/// order of the input).
pub fn parse_answer(
    value: &Value,
    model: &str,
    count: usize,
    expected: Option<usize>,
) -> std::result::Result<Vec<Vec<f32>>, Fault> {
    if let Some(answered) = value.get("model").and_then(Value::as_str)
        && !same_model(answered, model)
    {
        return Err(Fault::WrongModel {
            asked: model.to_string(),
            answered: answered.to_string(),
        });
    }
    let data = value
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| Fault::Garbage("no \"data\" list".into()))?;
    if data.len() != count {
        return Err(Fault::Garbage(format!(
            "{} vectors for {count} texts",
            data.len()
        )));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; count];
    for (position, item) in data.iter().enumerate() {
        let index = match item.get("index") {
            None => position,
            Some(i) => i
                .as_u64()
                .map(|i| i as usize)
                .filter(|i| *i < count)
                .ok_or_else(|| Fault::Garbage(format!("a bad index {i}")))?,
        };
        let numbers = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| Fault::Garbage("an item without an \"embedding\" list".into()))?;
        let vector: Vec<f32> = numbers
            .iter()
            .map(|n| n.as_f64().filter(|x| x.is_finite()).map(|x| x as f32))
            .collect::<Option<_>>()
            .ok_or_else(|| Fault::Garbage("an embedding holds a non-number".into()))?;
        let want =
            expected.unwrap_or_else(|| out.iter().flatten().next().map_or(vector.len(), Vec::len));
        if vector.len() != want || vector.is_empty() {
            return Err(Fault::WrongDimension {
                expected: want,
                answered: vector.len(),
            });
        }
        let slot = out
            .get_mut(index)
            .ok_or_else(|| Fault::Garbage(format!("a bad index {index}")))?;
        if slot.is_some() {
            return Err(Fault::Garbage(format!("index {index} twice")));
        }
        *slot = Some(normalized(vector));
    }
    out.into_iter()
        .map(|v| v.ok_or_else(|| Fault::Garbage("a text without a vector".into())))
        .collect()
}

/// An answered model name matches the asked one exactly, or as the asked
/// one's last path segment (`org/model` asked, `model` answered) and back.
fn same_model(answered: &str, asked: &str) -> bool {
    let last = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    answered == asked || last(answered) == last(asked)
}

fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    }
    v
}

fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_blob(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .filter_map(|c| <[u8; 4]>::try_from(c).ok())
        .map(f32::from_le_bytes)
        .collect()
}

/// Cosine of two unit vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The key a text's vector is stored under.
pub fn text_hash(text: &str) -> Vec<u8> {
    Sha256::digest(text.as_bytes()).to_vec()
}

fn head(text: &str) -> &str {
    let cut = mc_base::domain::content::floor_boundary(text, MAX_TEXT_BYTES);
    text.get(..cut).unwrap_or_default()
}

/// One searchable item, as hybrid search and the backfill both name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Item {
    #[default]
    None,
    Memory(i64),
    Note(i64),
    /// (session row id, sequence)
    Compartment(i64, i64),
    /// raw_parts.id
    Message(i64),
    /// git_commits.id
    Commit(i64),
}

/// The text of `item` that is embedded (None: it is gone).
pub fn item_text(conn: &Connection, item: Item) -> Result<Option<String>> {
    let text: Option<String> = match item {
        Item::None => None,
        Item::Memory(id) => conn
            .prepare_cached("SELECT content FROM memories WHERE id = ?1")?
            .query_row(params![id], |r| r.get(0))
            .optional()?,
        Item::Note(id) => conn
            .prepare_cached("SELECT content FROM notes WHERE id = ?1")?
            .query_row(params![id], |r| r.get(0))
            .optional()?,
        Item::Compartment(session, sequence) => conn
            .prepare_cached(
                "SELECT title || char(10) || p1 || char(10) || p2 || char(10) || p3 || char(10) || p4
                 FROM compartments WHERE session = ?1 AND sequence = ?2",
            )?
            .query_row(params![session, sequence], |r| r.get(0))
            .optional()?,
        Item::Message(id) => conn
            .prepare_cached("SELECT kind, tool_name, tool_input, content FROM raw_parts WHERE id = ?1")?
            .query_row(params![id], |r| {
                let kind: String = r.get(0)?;
                let name: Option<String> = r.get(1)?;
                let input: Option<String> = r.get(2)?;
                let content: String = r.get(3)?;
                Ok(if kind == "tool" {
                    format!(
                        "{}\n{}\n{content}",
                        name.unwrap_or_default(),
                        input.unwrap_or_default()
                    )
                } else {
                    content
                })
            })
            .optional()?,
        Item::Commit(id) => conn
            .prepare_cached(
                "SELECT subject || char(10) || body || char(10) || paths FROM git_commits WHERE id = ?1",
            )?
            .query_row(params![id], |r| r.get(0))
            .optional()?,
    };
    Ok(text.map(|t| head(&t).to_string()))
}

fn recorded_dimensions(conn: &Connection, name: &str) -> rusqlite::Result<Option<usize>> {
    conn.prepare_cached("SELECT dimensions FROM embedding_models WHERE model = ?1")?
        .query_row(params![name], |r| r.get::<_, i64>(0))
        .optional()
        .map(|d| d.map(|d| d as usize))
}

/// The stored vector of `hash` under model `name`, if it has the length.
pub fn stored_vector(
    conn: &Connection,
    name: &str,
    hash: &[u8],
    dimensions: usize,
) -> Result<Option<Vec<f32>>> {
    let blob: Option<Vec<u8>> = conn
        .prepare_cached("SELECT vector FROM embeddings WHERE model = ?1 AND hash = ?2")?
        .query_row(params![name, hash], |r| r.get(0))
        .optional()?;
    Ok(blob
        .filter(|b| b.len() == dimensions * 4)
        .map(|b| from_blob(&b)))
}

/// Every item that may be searched, oldest first per source, with the
/// project it belongs to (None: a session that never knew its project).
fn all_items(conn: &Connection) -> Result<Vec<(Item, Option<String>)>> {
    let mut items = Vec::new();
    let mut read = |sql: &str, item: &dyn Fn(i64, i64) -> Item| -> Result<()> {
        let mut stmt = conn.prepare(sql)?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get(2)?))
        })?;
        for row in rows {
            let (a, b, project) = row?;
            items.push((item(a, b), project));
        }
        Ok(())
    };
    read(
        "SELECT id, 0, project FROM memories WHERE status IN ('active', 'permanent') ORDER BY id",
        &|id, _| Item::Memory(id),
    )?;
    read("SELECT id, 0, project FROM notes ORDER BY id", &|id, _| {
        Item::Note(id)
    })?;
    read(
        "SELECT c.session, c.sequence, s.project_identity FROM compartments c
           JOIN sessions s ON s.id = c.session ORDER BY c.session, c.sequence",
        &Item::Compartment,
    )?;
    read(
        "SELECT r.id, 0, s.project_identity FROM raw_parts r JOIN sessions s ON s.id = r.session
         WHERE r.kind != 'file' ORDER BY r.id",
        &|id, _| Item::Message(id),
    )?;
    read(
        "SELECT id, 0, project FROM git_commits ORDER BY id",
        &|id, _| Item::Commit(id),
    )?;
    Ok(items)
}

/// What a backfill did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Backfill {
    pub model: String,
    pub dimensions: Option<usize>,
    /// Items that can be searched.
    pub items: u64,
    /// Distinct texts that had a vector already.
    pub present: u64,
    /// Texts embedded by this run.
    pub embedded: u64,
    /// Requests sent (retries included).
    pub requests: u64,
    /// Vectors of texts no item has any more, deleted.
    pub pruned: u64,
    /// Rows of the vector index written (projects whose index changed).
    pub indexed: u64,
}

/// Embed every searchable text that has no vector under `provider`'s model
/// yet, `batch_size` texts a request, each batch stored in its own
/// transaction (a stopped backfill resumes where it was; two at once store
/// each vector once). A retryable fault is retried `retries` times with a
/// doubling wait; any other fault, or one that outlasts the retries, stops
/// the backfill with what is stored kept. `progress(done, total)` after each
/// batch; `sleep` waits between retries.
pub fn backfill(
    store: &mut Store,
    provider: &Provider,
    progress: &mut dyn FnMut(u64, u64),
    sleep: &dyn Fn(Duration),
) -> Result<Backfill> {
    let items = all_items(store.conn())?;
    let mut report = Backfill {
        model: provider.name.clone(),
        items: items.len() as u64,
        ..Backfill::default()
    };
    // Which texts lack a vector: hashes only, the texts are read again per batch.
    let mut live: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut missing: Vec<(Vec<u8>, Item)> = Vec::new();
    // What the vector index is built of: each project's items and their texts' hashes.
    let mut indexed: BTreeMap<String, Vec<(Item, Vec<u8>)>> = BTreeMap::new();
    {
        let conn = store.conn();
        let mut has =
            conn.prepare_cached("SELECT 1 FROM embeddings WHERE model = ?1 AND hash = ?2")?;
        for (item, project) in &items {
            let Some(text) = item_text(conn, *item)? else {
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            let hash = text_hash(&text);
            if let Some(project) = project {
                indexed
                    .entry(project.clone())
                    .or_default()
                    .push((*item, hash.clone()));
            }
            if !live.insert(hash.clone()) {
                continue;
            }
            if has.exists(params![provider.name, hash])? {
                report.present += 1;
            } else {
                missing.push((hash, *item));
            }
        }
    }
    let mut expected = provider.expected_dimensions(store.conn())?;
    if let (Some(want), Some(have)) = (
        provider.dimensions,
        recorded_dimensions(store.conn(), &provider.name)?,
    ) && want != have
    {
        return Err(Error::input(format!(
            "embeddings.dimensions is {want}, but the vectors stored for {} are {have} long",
            provider.name
        ))
        .with_hint(
            "set embeddings.dimensions back, or to 0 (learned), or use another model name",
        ));
    }
    let total = missing.len() as u64;
    progress(0, total);
    for batch in missing.chunks(provider.batch_size) {
        let texts: Vec<String> = batch
            .iter()
            .map(|(_, item)| item_text(store.conn(), *item).map(Option::unwrap_or_default))
            .collect::<Result<_>>()?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut wait = FIRST_BACKOFF;
        let mut attempt = 0;
        let vectors = loop {
            report.requests += 1;
            match provider.embed(&refs, expected, provider.timeout) {
                Ok(v) => break v,
                Err(fault) if fault.retryable() && attempt < provider.retries => {
                    attempt += 1;
                    sleep(wait);
                    wait *= 2;
                }
                Err(fault) => {
                    return Err(Error::Io(std::io::Error::other(format!(
                        "embedding with {} at {}: {fault} ({} of {total} texts embedded; \
                         run it again to go on)",
                        provider.name,
                        provider.place(),
                        report.embedded
                    ))));
                }
            }
        };
        let dims = vectors.first().map_or(0, Vec::len);
        expected = Some(dims);
        // Each text's own hash: texts changed since the scan are stored under their new one.
        store.write(|tx| {
            tx.execute(
                "INSERT OR IGNORE INTO embedding_models (model, dimensions) VALUES (?1, ?2)",
                params![provider.name, dims as i64],
            )?;
            let mut insert = tx.prepare_cached(
                "INSERT OR IGNORE INTO embeddings (model, hash, vector) VALUES (?1, ?2, ?3)",
            )?;
            for (text, vector) in texts.iter().zip(&vectors) {
                insert.execute(params![provider.name, text_hash(text), to_blob(vector)])?;
            }
            Ok(())
        })?;
        report.embedded += batch.len() as u64;
        progress(report.embedded, total);
    }
    report.dimensions = expected;
    // Vectors of texts that no item holds any more (edited, deleted).
    let stored: Vec<Vec<u8>> = store
        .conn()
        .prepare("SELECT hash FROM embeddings WHERE model = ?1")?
        .query_map(params![provider.name], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let stale: Vec<Vec<u8>> = stored.into_iter().filter(|h| !live.contains(h)).collect();
    if !stale.is_empty() {
        store.write(|tx| {
            let mut delete =
                tx.prepare_cached("DELETE FROM embeddings WHERE model = ?1 AND hash = ?2")?;
            for h in &stale {
                delete.execute(params![provider.name, h])?;
            }
            Ok(())
        })?;
    }
    report.pruned = stale.len() as u64;
    if let Some(dims) = report.dimensions {
        report.indexed = store_index(store, &provider.name, dims, indexed)?;
    }
    Ok(report)
}

/// Write the vector index of every project from the stored vectors (a
/// project whose rows are unchanged is left as it is).
fn store_index(
    store: &mut Store,
    model: &str,
    dims: usize,
    indexed: BTreeMap<String, Vec<(Item, Vec<u8>)>>,
) -> Result<u64> {
    let mut projects: BTreeMap<String, Vec<(Item, Vec<f32>)>> = BTreeMap::new();
    for (project, rows) in indexed {
        let mut vectors = Vec::with_capacity(rows.len());
        for (item, hash) in rows {
            if let Some(v) = stored_vector(store.conn(), model, &hash, dims)? {
                vectors.push((item, v));
            }
        }
        projects.insert(project, vectors);
    }
    store.write(|tx| vectors::store(tx, model, dims, projects))
}

/// How the vectors take part in a ranking. Each full-text candidate scores
/// `1 / (RRF_K + word rank)` plus `weight / (RRF_K + vector rank)`; each
/// of the project's `nearest` items by vector that the words did not find
/// scores `only_weight / (RRF_K + vector rank)`, the vector rank taken
/// over both together. The full-text `keep` best hold their places (the
/// words' sure hits are never pushed down by a weak vector).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    /// The vector ranking's weight against the words' (1.0: equal).
    pub weight: f64,
    /// Full-text candidates per source that are re-ranked.
    pub depth: usize,
    /// The full-text top that holds its places.
    pub keep: usize,
    /// Items taken from the vector index by similarity alone (0: none).
    pub nearest: usize,
    /// The weight of a vector-only candidate's rank.
    pub only_weight: f64,
}

/// The fusion mc uses: chosen on bench-search's QA and paraphrase sets so
/// that no question kind loses recall@10 to the vectors (docs/benchmarks.md).
pub const FUSION: Fusion = Fusion {
    weight: 1.0,
    depth: 30,
    keep: 3,
    nearest: 20,
    only_weight: 2.0,
};

impl Fusion {
    /// The fused scores of the candidates (best first by full text; their
    /// cosines, None without a vector) and of the vector-only items (their
    /// cosines).
    pub fn scores(&self, candidates: &[Option<f32>], only: &[f32]) -> (Vec<f64>, Vec<f64>) {
        // Vector ranks over both lists: (cosine, list, position); ties in list order.
        let mut similar: Vec<(f32, usize, usize)> = candidates
            .iter()
            .enumerate()
            .filter_map(|(p, c)| c.map(|c| (c, 0, p)))
            .chain(only.iter().enumerate().map(|(p, c)| (*c, 1, p)))
            .collect();
        similar.sort_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
        let mut words: Vec<f64> = (0..candidates.len())
            .map(|p| 1.0 / (RRF_K + p as f64 + 1.0))
            .collect();
        let mut vectors = vec![0.0; only.len()];
        for (rank, (_, list, position)) in similar.iter().enumerate() {
            let (slot, weight) = if *list == 0 {
                (words.get_mut(*position), self.weight)
            } else {
                (vectors.get_mut(*position), self.only_weight)
            };
            if let Some(s) = slot {
                *s += weight / (RRF_K + rank as f64 + 1.0);
            }
        }
        // The kept top: above anything fusion can give the rest, in their order.
        let ceiling = (1.0 + self.weight.max(self.only_weight)) / (RRF_K + 1.0);
        for (position, s) in words.iter_mut().enumerate().take(self.keep) {
            *s = ceiling + (self.keep - position) as f64 * 1e-6;
        }
        (words, vectors)
    }
}

/// What the vectors say of a query: the cosine of each full-text candidate
/// (None: no vector yet), and the project's nearest items by vector alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Similar {
    pub candidates: Vec<Option<f32>>,
    /// Nearest first, candidates included (the caller leaves them out).
    pub nearest: Vec<(Item, f32)>,
    /// Candidates with no stored vector (ranked by full text alone).
    pub without_vector: usize,
    /// What the caller should be told (a damaged index: no vector-only candidates).
    pub warnings: Vec<String>,
}

/// The query's vector against `candidates` (best first, by full text) and
/// against `project`'s vector index (its `nearest` best). `Err` carries
/// the warning to show when no vector could be had (the candidates are
/// then ranked by full text).
pub fn similar(
    conn: &Connection,
    provider: &Provider,
    project: &str,
    query: &str,
    candidates: &[Item],
    nearest: usize,
) -> std::result::Result<Similar, String> {
    let expected = provider
        .expected_dimensions(conn)
        .map_err(|e| format!("embeddings unavailable ({e}); ranked by full text only"))?;
    let Some(dims) = expected else {
        return Err(
            "no embeddings stored yet (run `mc-search index --embeddings`); ranked by full text only"
                .into(),
        );
    };
    let query_vector = provider
        .embed(&[query], Some(dims), provider.query_timeout)
        .map_err(|f| format!("embeddings unavailable: {f}; ranked by full text only"))?
        .into_iter()
        .next()
        .unwrap_or_default();
    let q = vectors::Query::new(&query_vector);
    let mut warnings = Vec::new();
    let index = match provider.index.get(conn, &provider.name, project) {
        Ok(Some(Ok(index))) if index.dimensions == dims => Some(index),
        Ok(None) => {
            if nearest > 0 {
                warnings.push(
                    "no vector index of this project yet (run `mc-search index --embeddings`); \
                     no candidates by meaning alone"
                        .to_string(),
                );
            }
            None
        }
        Ok(Some(Ok(_))) => {
            warnings.push(format!(
                "the vector index of {} is of another length (run `mc-search index \
                 --embeddings`); no candidates by meaning alone",
                provider.name
            ));
            None
        }
        Ok(Some(Err(why))) => {
            warnings.push(format!(
                "the vector index of {} is damaged ({why}; run `mc-search index \
                 --embeddings`); no candidates by meaning alone",
                provider.name
            ));
            None
        }
        Err(e) => {
            warnings.push(format!(
                "the vector index of {} cannot be read ({e}); no candidates by meaning alone",
                provider.name
            ));
            None
        }
    };
    let mut without = 0;
    let cosines = candidates
        .iter()
        .map(|item| {
            let indexed = index.as_ref().and_then(|i| i.cosine(*item, &q));
            let c = indexed.or_else(|| {
                // Not indexed yet (newer than the last backfill's index): its stored vector.
                let text = item_text(conn, *item).ok().flatten()?;
                let v = stored_vector(conn, &provider.name, &text_hash(&text), dims)
                    .ok()
                    .flatten()?;
                Some(cosine(&query_vector, &v))
            });
            without += usize::from(c.is_none());
            c
        })
        .collect();
    let nearest = match &index {
        Some(index) if nearest > 0 => index.nearest(&q, nearest),
        _ => Vec::new(),
    };
    Ok(Similar {
        candidates: cosines,
        nearest,
        without_vector: without,
        warnings,
    })
}

#[cfg(test)]
pub(crate) mod tests;
