//! A process that holds a permit of a shared key on a SQLite file until it is killed: the
//! second process of `tests/shared_sqlite.rs` (which kills it with SIGKILL).
//!
//! ```sh
//! cargo run -p turnstile --features sqlite --example sqlite_holder -- FILE KEY LEASE_MS
//! ```
//!
//! It opens FILE, acquires a permit of KEY (limit 1) with leases of LEASE_MS, prints `held
//! <ticket>` on stdout and keeps the permit (renewing its lease) until it is killed.

use std::io::Write;
use std::sync::Arc;

use turnstile::shared::SqliteStoreOptions;
use turnstile::shared::{AcquireTerms, SharedKeys, SharedKeysOptions, SqliteStore};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(key), Some(lease_ms)) = (args.next(), args.next(), args.next()) else {
        return Err("usage: sqlite_holder FILE KEY LEASE_MS".into());
    };
    let store = SqliteStore::open(&path, SqliteStoreOptions::default()).await?;
    let options = SharedKeysOptions {
        lease_ms: lease_ms.parse()?,
        owner: Some("holder".to_owned()),
        ..SharedKeysOptions::default()
    };
    let keys = SharedKeys::new(Arc::new(store), options)?;
    let permit = keys.acquire(&key, AcquireTerms::new(1)).await?;
    let mut out = std::io::stdout();
    writeln!(out, "held {}", permit.ticket())?;
    out.flush()?;
    let error = permit.lost().await;
    Err(format!("the permit was lost: {error}").into())
}
