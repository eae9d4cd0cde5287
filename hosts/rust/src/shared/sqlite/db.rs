//! The SQLite store's connection and every transaction it runs (the synchronous half, on the
//! store's own thread): the JS store's `sqlite.ts` statement for statement, on the texts of the
//! repository's `shared/store/` (`sqlite.sql`, `sqlite-statements.json`), so a Rust, a JS and a
//! Python process share one file. `ops.rs` holds the contract's operations and the grant rule;
//! this file the connection: opening, the file's identity, transactions and their retries,
//! errors.

mod ops;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Params, Row};

use crate::shared::StoreError;

/// The schema, one script (read at compile time from the repository's one copy).
const SCHEMA: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/store/sqlite.sql"
));
/// `{"schemaVersion": 3, "statements": {name: sql}}`.
const STATEMENTS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/store/sqlite-statements.json"
));

/// Every statement this store runs (the Python package's `STATEMENT_NAMES`).
const STATEMENT_NAMES: [&str; 31] = [
    "version",
    "meta",
    "setMeta",
    "wipeTickets",
    "wipeKeys",
    "wipeArrivals",
    "ensureKey",
    "purge",
    "ticket",
    "nextSeq",
    "insert",
    "renew",
    "head",
    "held",
    "keyState",
    "arrivals",
    "setArrival",
    "grant",
    "countGrant",
    "remove",
    "pause",
    "peek",
    "earliestExpiry",
    "list",
    "settle",
    "forgetArrivals",
    "forget",
    "sweepTickets",
    "sweepArrivals",
    "sweepKeys",
    "countKeys",
];

const GRANTS_PER_CALL_MAX: usize = 10_000;
const RETRY_MS_MAX: u64 = 16;
/// The store's time is CLOCK_MONOTONIC in ms plus this (24 h, the longest delay): a last grant
/// of 0 ("none yet") is then always longer ago than any delay.
pub(super) const CLOCK_BASE_MS: u64 = 86_400_000;

/// The store's now: CLOCK_MONOTONIC (the clock every process of the machine reads alike, Node's
/// `process.hrtime.bigint()` and Python's `time.monotonic_ns()`; it never steps) in whole ms,
/// plus 24 h.
pub(super) fn now_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let ms = u64::try_from(t.tv_nsec).unwrap_or(0) / 1_000_000;
    secs * 1000 + ms + CLOCK_BASE_MS
}

/// The store texts, parsed once.
struct Texts {
    version: String,
    statements: HashMap<String, String>,
}

fn texts() -> Result<&'static Texts, StoreError> {
    static TEXTS: OnceLock<Option<Texts>> = OnceLock::new();
    let parsed = TEXTS.get_or_init(|| {
        let json: serde_json::Value = serde_json::from_str(STATEMENTS).ok()?;
        let version = json.get("schemaVersion")?.as_u64()?.to_string();
        let statements = (json.get("statements")?.as_object()?.iter())
            .filter_map(|(name, sql)| Some((name.clone(), sql.as_str()?.to_owned())))
            .collect();
        let texts = Texts {
            version,
            statements,
        };
        (STATEMENT_NAMES.iter())
            .all(|name| texts.statements.contains_key(*name))
            .then_some(texts)
    });
    parsed.as_ref().ok_or_else(|| {
        failed(
            "sqlite-statements.json is not {schemaVersion, statements} with every statement this \
             store runs"
                .into(),
        )
    })
}

/// A statement failed, or the contract's own error (a split, a refusal, a row no client writes).
pub(super) enum OpError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for OpError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sql(e)
    }
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

type Op<T> = Result<T, OpError>;

/// The store's connection (see the module doc).
pub(super) struct Db {
    conn: Connection,
    path: PathBuf,
    texts: &'static Texts,
    busy_timeout_ms: u64,
    /// The file opened: `(st_dev, st_ino)`.
    file: (u64, u64),
    boot: String,
    /// When the file was created on the store's clock (0: before this boot): no grant before
    /// this plus the head's lease.
    created_ms: u64,
    /// Set once the path no longer names the file opened: every call fails with it.
    split: Arc<Mutex<Option<StoreError>>>,
}

impl Db {
    /// Opens (the first time, creates) the database, tried again while it is locked, for up to
    /// `busy_timeout_ms`.
    pub(super) fn open(
        path: &Path,
        busy_timeout_ms: u64,
        split: Arc<Mutex<Option<StoreError>>>,
    ) -> Result<Self, StoreError> {
        let texts = texts()?;
        let boot = boot_id();
        retry_locked("open", path, busy_timeout_ms, || {
            Self::open_once(path, busy_timeout_ms, texts, &boot, &split)
        })
    }

    fn open_once(
        path: &Path,
        busy_timeout_ms: u64,
        texts: &'static Texts,
        boot: &str,
        split: &Arc<Mutex<Option<StoreError>>>,
    ) -> Op<Self> {
        let shown = path.display();
        let conn = Connection::open(path)
            .map_err(|e| unavailable(format!("open {shown}: {e}{}", code_suffix(&e))))?;
        // Never wait inside SQLite: a locked transaction is tried again by `retry_locked`.
        conn.busy_timeout(Duration::ZERO)?;
        let file = file_id(path)?.ok_or_else(|| {
            unavailable(format!("open {shown}: the file is gone as it was opened"))
        })?;
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
        conn.execute_batch("PRAGMA synchronous = NORMAL")?;
        conn.set_prepared_statement_cache_capacity(64);
        let mut db = Self {
            conn,
            path: path.to_owned(),
            texts,
            busy_timeout_ms,
            file,
            boot: boot.to_owned(),
            created_ms: 0,
            split: Arc::clone(split),
        };
        // The version first: another version's tables may lack what this schema indexes.
        let found = db.transaction_unchecked(true, |db| {
            let version: Option<String> = (db.conn)
                .query_row(db.sql("version")?, [], |r| r.get(0))
                .ok(); // no meta table yet: a new file
            if version.as_ref().is_some_and(|v| *v != db.texts.version) {
                return Ok(version);
            }
            db.conn.execute_batch(SCHEMA)?;
            Ok(None)
        })?;
        if let Some(found) = found {
            return Err(failed(format!(
                "{shown} holds shared-key schema {found}; this package knows schema {} (schema 2 \
                 had no rate windows, schema 1 ran on the wall clock: delete the file once no \
                 process of an older version uses it)",
                texts.version
            ))
            .into());
        }
        db.created_ms = db.transaction_unchecked(true, |db| {
            let now = now_ms();
            let recorded: Option<String> = db.row("meta", ["boot"], |r| r.get(0))?;
            match recorded {
                // A new file: it grants nothing for one lease (see the module doc of `mod.rs`).
                None => {
                    db.exec("setMeta", ["boot", &db.boot])?;
                    db.exec("setMeta", ["created_ms", &now.to_string()])?;
                }
                // The first process of a new boot: every process of the last one is gone, and
                // its times were on the last boot's clock.
                Some(recorded) if recorded != db.boot => {
                    db.exec("wipeTickets", [])?;
                    db.exec("wipeKeys", [])?;
                    db.exec("wipeArrivals", [])?;
                    db.exec("setMeta", ["boot", &db.boot])?;
                    db.exec("setMeta", ["created_ms", "0"])?;
                }
                Some(_) => {}
            }
            db.check()?;
            let created: Option<String> = db.row("meta", ["created_ms"], |r| r.get(0))?;
            Ok(created.and_then(|c| c.parse().ok()).unwrap_or(0))
        })?;
        Ok(db)
    }

    /// One write operation (`BEGIN IMMEDIATE`), tried again while the file is locked, for up
    /// to the busy timeout.
    pub(super) fn write<T>(
        &self,
        what: &str,
        f: impl Fn(&Self, u64) -> Op<T>,
    ) -> Result<T, StoreError> {
        self.run(what, || self.transaction(true, &f))
    }

    /// One read operation (a deferred transaction: no lock in WAL mode).
    pub(super) fn read<T>(
        &self,
        what: &str,
        f: impl Fn(&Self, u64) -> Op<T>,
    ) -> Result<T, StoreError> {
        self.run(what, || self.transaction(false, &f))
    }

    fn run<T>(&self, what: &str, f: impl FnMut() -> Op<T>) -> Result<T, StoreError> {
        if let Some(split) = self.split() {
            return Err(split);
        }
        retry_locked(what, &self.path, self.busy_timeout_ms, f)
    }

    pub(super) fn split(&self) -> Option<StoreError> {
        self.split
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A transaction that first checks the file (see [`Db::check`]).
    fn transaction<T>(&self, immediate: bool, f: impl FnOnce(&Self, u64) -> Op<T>) -> Op<T> {
        self.transaction_unchecked(immediate, |db| {
            db.check()?;
            f(db, now_ms())
        })
    }

    fn transaction_unchecked<T>(&self, immediate: bool, f: impl FnOnce(&Self) -> Op<T>) -> Op<T> {
        let begin = if immediate {
            "BEGIN IMMEDIATE"
        } else {
            "BEGIN DEFERRED"
        };
        self.conn.execute_batch(begin)?;
        let out = f(self).and_then(|v| Ok(self.conn.execute_batch("COMMIT").map(|()| v)?));
        if out.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        out
    }

    /// Inside every transaction: the path still names the file opened, of this boot;
    /// otherwise the store is split and stays so.
    fn check(&self) -> Op<()> {
        if let Some(split) = self.split() {
            return Err(split.into());
        }
        let why = match file_id(&self.path)? {
            None => "the file was deleted or moved",
            Some(file) if file != self.file => {
                "the path names another file now (the file was replaced)"
            }
            Some(_) => {
                let boot: Option<String> = self.row("meta", ["boot"], |r| r.get(0))?;
                if boot.as_deref() == Some(self.boot.as_str()) {
                    return Ok(());
                }
                "the file was opened by another machine (or boot): the SQLite store serves one \
                 machine"
            }
        };
        let error = StoreError::Split {
            store: "sqlite".to_owned(),
            path: self.path.display().to_string(),
            message: format!(
                "{why}; processes opening the path now would share another store than this one, \
                 so this store grants, writes and releases nothing more"
            ),
        };
        *self.split.lock().unwrap_or_else(PoisonError::into_inner) = Some(error.clone());
        Err(error.into())
    }

    fn sql(&self, name: &str) -> Op<&'static str> {
        (self.texts.statements.get(name))
            .map(String::as_str)
            .ok_or_else(|| {
                failed(format!("sqlite-statements.json has no statement {name:?}")).into()
            })
    }

    fn exec(&self, name: &str, params: impl Params) -> Op<usize> {
        Ok(self.conn.prepare_cached(self.sql(name)?)?.execute(params)?)
    }

    fn row<T>(
        &self,
        name: &str,
        params: impl Params,
        f: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Op<Option<T>> {
        let mut statement = self.conn.prepare_cached(self.sql(name)?)?;
        Ok(statement.query_row(params, f).optional()?)
    }

    fn one<T>(
        &self,
        name: &str,
        params: impl Params,
        f: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Op<T> {
        self.row(name, params, f)?
            .ok_or_else(|| failed(format!("statement {name} returned no row")).into())
    }

    fn rows<T>(
        &self,
        name: &str,
        params: impl Params,
        f: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Op<Vec<T>> {
        let mut statement = self.conn.prepare_cached(self.sql(name)?)?;
        let rows = statement.query_map(params, f)?;
        Ok(rows.collect::<rusqlite::Result<Vec<T>>>()?)
    }
}

/// Runs `f` (one transaction), and again after a back-off while it finds the database locked
/// (1 ms doubling to 16, jittered), for at most `busy_timeout_ms`: the JS store's loop, on the
/// store's own thread.
fn retry_locked<T>(
    what: &str,
    path: &Path,
    busy_timeout_ms: u64,
    mut f: impl FnMut() -> Op<T>,
) -> Result<T, StoreError> {
    let deadline = now_ms() + busy_timeout_ms;
    for attempt in 0u32.. {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if is_busy(&e) && now_ms() < deadline => {}
            Err(e) => return Err(store_error(what, path, busy_timeout_ms, e)),
        }
        let wait = backoff_ms(attempt).min(deadline.saturating_sub(now_ms()).max(1));
        std::thread::sleep(Duration::from_millis(wait));
    }
    Err(unavailable(format!("{what}: retried too often")))
}

/// The back-off before try `attempt + 1`: 1 ms doubling to 16, jittered so that processes
/// retrying together spread out.
fn backoff_ms(attempt: u32) -> u64 {
    let top = 1u64
        .checked_shl(attempt)
        .unwrap_or(RETRY_MS_MAX)
        .min(RETRY_MS_MAX);
    let jitter = RandomState::new().build_hasher().finish() % 1000;
    (top * (500 + jitter / 2) / 1000).max(1)
}

/// SQLite's primary result code of a failed statement.
fn primary_code(e: &rusqlite::Error) -> Option<i32> {
    e.sqlite_error().map(|s| s.extended_code & 0xff)
}

fn is_busy(e: &OpError) -> bool {
    matches!(e, OpError::Sql(e) if matches!(primary_code(e), Some(5 | 6)))
}

/// SQLite's errors as the contract's: the file cannot be opened, stays locked past the busy
/// timeout, or fails to read or write: `Unavailable`; the contract's own errors as they are;
/// anything else: `Failed`.
fn store_error(what: &str, path: &Path, busy_timeout_ms: u64, e: OpError) -> StoreError {
    let e = match e {
        OpError::Store(e) => return e,
        OpError::Sql(e) => e,
    };
    let suffix = code_suffix(&e);
    match primary_code(&e) {
        Some(5 | 6) => unavailable(format!(
            "{what}: the database stayed locked for more than {busy_timeout_ms} ms ({e}){suffix}"
        )),
        // CANTOPEN, IOERR, FULL, READONLY, PROTOCOL, PERM, AUTH, NOTADB, CORRUPT
        Some(14 | 10 | 13 | 8 | 15 | 3 | 23 | 26 | 11) => {
            unavailable(format!("{what} {}: {e}{suffix}", path.display()))
        }
        _ => failed(format!("sqlite {what}: {e}")),
    }
}

fn code_suffix(e: &rusqlite::Error) -> String {
    e.sqlite_error()
        .map(|s| format!(" [{:?}, code {}]", s.code, s.extended_code))
        .unwrap_or_default()
}

/// This boot of this machine (Linux's boot id; `unknown` elsewhere).
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The identity of the file `path` names now; `None` when it names none.
fn file_id(path: &Path) -> Result<Option<(u64, u64)>, StoreError> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some((m.dev(), m.ino()))),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(unavailable(format!("stat {}: {e}", path.display()))),
    }
}

fn num<T: TryFrom<i64>>(v: i64) -> Op<T> {
    T::try_from(v).map_err(|_| refused(&format!("the number {v}")).into())
}

fn refused(what: &str) -> StoreError {
    failed(format!("the store holds a ticket no client writes: {what}"))
}

pub(super) fn unavailable(message: String) -> StoreError {
    StoreError::Unavailable {
        store: "sqlite".to_owned(),
        message,
    }
}

fn failed(message: String) -> StoreError {
    StoreError::Failed {
        store: "sqlite".to_owned(),
        message,
    }
}
