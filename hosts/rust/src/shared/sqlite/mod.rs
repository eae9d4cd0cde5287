//! The SQLite store (the JS package's `sqlite.ts`, the Python package's `sqlite.py`): the
//! processes of one machine share one database file; no server. WAL mode (readers never block
//! the writer), `BEGIN IMMEDIATE` transactions of a few statements each. The schema and every
//! statement are the repository's `shared/store/sqlite.sql` and `sqlite-statements.json`, read
//! at compile time, and the grant rule is the engine's
//! [`decide`](turnstile_engine::shared::grant::decide): the JS and Python stores run the same
//! ones, so a Rust, a JS and a Python process share one file as one store.
//!
//! The clock is the machine's CLOCK_MONOTONIC (the one Node's `process.hrtime.bigint()` and
//! Python's `time.monotonic_ns()` read), in ms plus 24 h (a last grant of 0 means "none yet").
//! One clock for every process of the machine, never stepped. It restarts at boot: the file
//! records the boot (`/proc/sys/kernel/random/boot_id`) and the first process of a new boot
//! empties it. So the file serves one machine.
//!
//! File identity: the store records the file's `(st_dev, st_ino)` at open and checks, inside
//! every transaction, that the path still names that file, of this boot. When it was deleted,
//! moved or replaced, the store fails closed with [`StoreError::Split`]: that call and every
//! later one fail with it; nothing is granted, written or released. A file the store creates
//! grants nothing before one lease (the head ticket's) from its creation, so a process still
//! holding a permit of a deleted file has learned it (its next heartbeat) before the new file
//! grants anything.
//!
//! Blocking: each store runs its statements on one thread of its own, with one connection (as
//! the Python store does), so no store call blocks the async runtime. SQLite itself never
//! waits for a lock (`busy_timeout` 0): a transaction that finds another process's write lock
//! is tried again on that thread after a back-off (1 ms doubling to 16 ms, jittered, as the JS
//! store does) until `busy_timeout_ms`, then fails with [`StoreError::Unavailable`].
//!
//! Waiting polls (SQLite has no wake-up across processes): a watched key is read, in a read
//! transaction that takes no lock, every `poll_min_ms` doubling to `poll_max_ms`, and back to
//! `poll_min_ms` after a change; a release or abandon made through this store wakes its own
//! watchers at once. A poll writes only when the rule could grant something (a lease expired,
//! or the head has room and its delay and pause are over), and is tried once (a locked file:
//! the next poll tries again).
//!
//! Idle keys are forgotten: every write settles the key's `idle_at_ms`, deletes its row once
//! that passed with no ticket left, and sweeps up to 16 other keys idle past their time.
//!
//! `mod.rs` holds the async half (the thread, the calls, the watches); `db.rs` the connection
//! (opening, the file's identity, transactions, busy retries, errors); `db/ops.rs` the
//! contract's operations as transactions, and the grant rule between their statements.

mod db;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use db::{Db, unavailable};

use super::store::{KeyInspection, Removal, StoreFuture, Terms, TicketState, Wake, Watch};
use super::{Store, StoreError, Watcher};

/// How a [`SqliteStore`] waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteStoreOptions {
    /// How long a transaction keeps trying for another process's write lock before the
    /// operation fails with [`StoreError::Unavailable`] (default 2000).
    pub busy_timeout_ms: u32,
    /// The shortest interval between two polls of a watched key (default 2).
    pub poll_min_ms: u32,
    /// The longest (default 25; at least `poll_min_ms`).
    pub poll_max_ms: u32,
}

impl Default for SqliteStoreOptions {
    fn default() -> Self {
        Self {
            busy_timeout_ms: 2000,
            poll_min_ms: 2,
            poll_max_ms: 25,
        }
    }
}

/// [`SqliteStore::open`] failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqliteStoreError {
    /// The path opens a private database (`""`, `":memory:"`): nothing would be shared
    /// between processes.
    PrivatePath {
        /// The path given.
        path: String,
        /// Why it is private.
        why: String,
    },
    /// The file cannot be opened, created or read, or stays locked
    /// ([`StoreError::Unavailable`]), or holds another schema version ([`StoreError::Failed`]).
    Store(StoreError),
}

impl std::fmt::Display for SqliteStoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::PrivatePath { why, .. } => write!(
                f,
                "path: {why}, so nothing would be shared between processes; give the path of a file"
            ),
            Self::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SqliteStoreError {}

/// A shared-key store on one SQLite file (see the module doc). Clones share the store (one
/// connection, one thread); every [`SqliteStore::open`] of the same file is another client of
/// the same store, as another process would be.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

type Job = Box<dyn FnOnce(&Db) + Send>;
/// A watch id and the way to nudge its poll.
type Poller = (u64, Arc<Notify>);

struct Inner {
    path: String,
    poll_min_ms: u64,
    poll_max_ms: u64,
    /// The store's thread; `None` once closed.
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    split: Arc<Mutex<Option<StoreError>>>,
    /// Watchers of this store by key: a local release or abandon nudges them at once.
    pollers: Mutex<HashMap<String, Vec<Poller>>>,
    next_watch: AtomicU64,
}

impl SqliteStore {
    /// Opens (and, the first time, creates) the database at `path`; its folder must exist.
    /// Fails with [`SqliteStoreError::PrivatePath`] for `""` and `":memory:"`, and with
    /// [`SqliteStoreError::Store`]: [`StoreError::Unavailable`] when the file cannot be opened
    /// (or stays locked past `busy_timeout_ms`), [`StoreError::Failed`] when it holds another
    /// schema version.
    pub async fn open(
        path: impl AsRef<Path>,
        options: SqliteStoreOptions,
    ) -> Result<Self, SqliteStoreError> {
        let path = path.as_ref().to_owned();
        let shown = path.display().to_string();
        if let Some(why) = private_path(&shown) {
            return Err(SqliteStoreError::PrivatePath { path: shown, why });
        }
        let split = Arc::new(Mutex::new(None));
        let (jobs, queue) = mpsc::channel::<Job>();
        let (opened_tx, opened) = oneshot::channel();
        let busy_timeout_ms = u64::from(options.busy_timeout_ms);
        let thread_split = Arc::clone(&split);
        std::thread::Builder::new()
            .name("turnstile-sqlite".to_owned())
            .spawn(move || {
                let db = match Db::open(&path, busy_timeout_ms, thread_split) {
                    Ok(db) => db,
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                        return;
                    }
                };
                let _ = opened_tx.send(Ok(()));
                // Ends (closing the connection) once every sender is gone: closed or dropped.
                while let Ok(job) = queue.recv() {
                    job(&db);
                }
            })
            .map_err(|e| SqliteStoreError::Store(unavailable(format!("{shown}: {e}"))))?;
        match opened.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(SqliteStoreError::Store(e)),
            Err(_) => {
                let e = unavailable(format!("open {shown}: the store's thread ended"));
                return Err(SqliteStoreError::Store(e));
            }
        }
        let poll_min_ms = u64::from(options.poll_min_ms.max(1));
        Ok(Self {
            inner: Arc::new(Inner {
                path: shown,
                poll_min_ms,
                poll_max_ms: u64::from(options.poll_max_ms).max(poll_min_ms),
                jobs: Mutex::new(Some(jobs)),
                split,
                pollers: Mutex::new(HashMap::new()),
                next_watch: AtomicU64::new(0),
            }),
        })
    }

    /// The file, as given to [`open`](Self::open).
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// The store's clock now: CLOCK_MONOTONIC in whole ms plus 24 h, the clock every SQLite
    /// store of the machine (JS, Python, Rust) reads.
    pub fn now_ms() -> u64 {
        db::now_ms()
    }

    /// How many keys the file holds a row for (live keys, and idle ones not yet swept): for
    /// tests and operators.
    pub async fn key_count(&self) -> Result<u64, StoreError> {
        self.inner.call("key_count", Db::key_count).await
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// Runs `f` on the store's thread. A call whose future is dropped still runs (as a JS
    /// promise would): `SharedKeys` gives back what it made.
    async fn call<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&Db) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        {
            let jobs = lock(&self.jobs);
            let Some(jobs) = jobs.as_ref() else {
                return Err(closed(what));
            };
            if let Some(split) = lock(&self.split).clone() {
                return Err(split);
            }
            let job: Job = Box::new(move |db| {
                let _ = tx.send(f(db));
            });
            jobs.send(job).map_err(|_| closed(what))?;
        }
        rx.await
            .unwrap_or_else(|_| Err(unavailable(format!("{what}: the store's thread ended"))))
    }

    fn nudge(&self, key: &str) {
        let pollers = lock(&self.pollers);
        for (_, notify) in pollers.get(key).into_iter().flatten() {
            notify.notify_one();
        }
    }

    async fn remove(
        &self,
        what: &'static str,
        key: &str,
        ticket: &str,
    ) -> Result<Removal, StoreError> {
        let (k, t) = (key.to_owned(), ticket.to_owned());
        let removal = self.call(what, move |db| db.remove(what, &k, &t)).await?;
        self.nudge(key);
        Ok(removal)
    }
}

impl Store for SqliteStore {
    fn kind(&self) -> &str {
        "sqlite"
    }

    fn request<'a>(
        &'a self,
        key: &'a str,
        ticket: &'a str,
        terms: &'a Terms,
    ) -> StoreFuture<'a, TicketState> {
        let (key, ticket, terms) = (key.to_owned(), ticket.to_owned(), terms.clone());
        Box::pin(
            self.inner
                .call("request", move |db| db.request(&key, &ticket, &terms)),
        )
    }

    fn renew<'a>(
        &'a self,
        key: &'a str,
        tickets: &'a [String],
    ) -> StoreFuture<'a, Vec<TicketState>> {
        let (key, tickets) = (key.to_owned(), tickets.to_vec());
        Box::pin(self.inner.call("renew", move |db| db.renew(&key, &tickets)))
    }

    fn release<'a>(&'a self, key: &'a str, ticket: &'a str) -> StoreFuture<'a, Removal> {
        Box::pin(self.inner.remove("release", key, ticket))
    }

    fn abandon<'a>(&'a self, key: &'a str, ticket: &'a str) -> StoreFuture<'a, Removal> {
        Box::pin(self.inner.remove("abandon", key, ticket))
    }

    fn pause<'a>(&'a self, key: &'a str, for_ms: u32) -> StoreFuture<'a, u64> {
        let key = key.to_owned();
        Box::pin(self.inner.call("pause", move |db| db.pause(&key, for_ms)))
    }

    /// Polls the key (see the module doc) on a task of the current tokio runtime; without a
    /// runtime, the watch never wakes (the heartbeat still renews and learns of grants).
    fn watch(&self, key: &str, watcher: Arc<dyn Watcher>) -> Watch {
        let notify = Arc::new(Notify::new());
        let id = self.inner.next_watch.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.pollers)
            .entry(key.to_owned())
            .or_default()
            .push((id, Arc::clone(&notify)));
        let weak = Arc::downgrade(&self.inner);
        let task = tokio::runtime::Handle::try_current().ok().map(|runtime| {
            runtime.spawn(poll_loop(
                Weak::clone(&weak),
                key.to_owned(),
                watcher,
                notify,
            ))
        });
        let key = key.to_owned();
        Watch::new(Box::pin(async {}), move || {
            if let Some(task) = task {
                task.abort();
            }
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let mut pollers = lock(&inner.pollers);
            if let Some(list) = pollers.get_mut(&key) {
                list.retain(|(i, _)| *i != id);
                if list.is_empty() {
                    pollers.remove(&key);
                }
            }
        })
    }

    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, KeyInspection> {
        let key = key.to_owned();
        Box::pin(self.inner.call("inspect", move |db| db.inspect(&key)))
    }

    /// Closes the connection once the calls already sent ran; later calls fail with
    /// [`StoreError::Unavailable`].
    fn close(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let jobs = lock(&self.inner.jobs).take();
            lock(&self.inner.pollers).clear();
            if let Some(jobs) = jobs {
                let (tx, rx) = oneshot::channel::<()>();
                let job: Job = Box::new(move |_| drop(tx));
                if jobs.send(job).is_ok() {
                    drop(jobs);
                    let _ = rx.await;
                }
            }
            Ok(())
        })
    }
}

/// One watch: polls `key` for the watcher's tickets while any waits, with a bounded back-off,
/// until the watch is dropped or the store closed (or dropped).
async fn poll_loop(
    inner: Weak<Inner>,
    key: String,
    watcher: Arc<dyn Watcher>,
    notify: Arc<Notify>,
) {
    let (min_ms, max_ms) = match inner.upgrade() {
        Some(i) => (i.poll_min_ms, i.poll_max_ms),
        None => return,
    };
    let mut delay_ms = min_ms;
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(delay_ms)) => {}
            () = notify.notified() => delay_ms = min_ms,
        }
        let Some(store) = inner.upgrade() else {
            return;
        };
        if lock(&store.jobs).is_none() {
            return;
        }
        let mine = watcher.tickets();
        let mut changed = Vec::new();
        if !mine.is_empty() && lock(&store.split).is_none() {
            let k = key.clone();
            let polled = store.call("poll", move |db| db.poll(&k, &mine)).await;
            // The heartbeat reports a store that stays unavailable or split; the poll backs off.
            changed = polled.unwrap_or_default();
            delay_ms = if changed.is_empty() {
                (delay_ms * 2).min(max_ms)
            } else {
                min_ms
            };
        } else {
            delay_ms = max_ms;
        }
        drop(store);
        if !changed.is_empty() {
            watcher.wake(Wake {
                states: changed,
                ..Wake::default()
            });
        }
    }
}

/// Why `path` opens a private database (nothing shared), or `None`.
fn private_path(path: &str) -> Option<String> {
    if path.is_empty() {
        return Some("the empty path opens a temporary private database".to_owned());
    }
    let memory_uri = path.starts_with("file:")
        && (path.starts_with("file::memory:")
            || path.contains("?mode=memory")
            || path.contains("&mode=memory"));
    (path == ":memory:" || memory_uri)
        .then(|| format!("{path:?} opens an in-memory private database"))
}

fn closed(what: &str) -> StoreError {
    unavailable(format!("{what}: the store is closed"))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
