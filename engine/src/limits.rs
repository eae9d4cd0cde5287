//! Every size the engine accepts has a limit; exceeding one is a typed error, never a trap.

/// Config layers per [`crate::config::resolve`] call.
pub const LAYERS_MAX: usize = 64;
/// Bytes of TOML text in one layer.
pub const LAYER_BYTES_MAX: usize = 1 << 20;
/// Bytes of a layer name, a tool name, a call id or a request id.
pub const NAME_BYTES_MAX: usize = 256;
/// Bytes of a concurrency key, the one limit for every key the scheduler holds: a configured
/// key, a template's text (its own key), the integer form's key (the tool's name, so a tool
/// whose name is longer cannot use the integer form) and every key a template makes. It is the
/// shared-key stores' limit (`KEY_LENGTH_MAX`, 200 UTF-16 code units in JS, 200 characters in
/// Python): a UTF-8 key of at most 200 bytes has at most 200 of either, so every key the
/// scheduler makes is one a store accepts, and the stores and their schema stay as they are.
/// A made key longer than this is not made: the call takes its template's own key (limited
/// among such calls, never unbounded, never an error), as when the arguments lack the field.
pub const KEY_BYTES_MAX: usize = 200;
/// Configured tools in a merged config.
pub const TOOLS_MAX: usize = 10_000;
/// Concurrency keys: each configured tool declares at most one, so there are at most as many
/// keys as tools (calls to unconfigured tools are unkeyed).
pub const KEYS_MAX: usize = TOOLS_MAX;
/// Calls in one batch.
pub const CALLS_PER_BATCH_MAX: usize = 100_000;
/// Operations of one fanned-out call.
pub const OPERATIONS_PER_CALL_MAX: u32 = 100_000;
/// Live entries (plain calls plus operations of batches not yet retired) one scheduler holds at
/// once. Retired batches free theirs: there is no lifetime limit.
pub const ENTRIES_MAX: usize = 4_000_000;
/// Requests an admission controller holds at once, in flight and queued together.
pub const REQUESTS_MAX: usize = 100_000;
/// Rate-limit retries one entry may be given (`concurrency.retries`).
pub const RETRIES_MAX: u32 = 100;
/// Retries per entry when the config does not say (`concurrency.retries`, and unkeyed tools).
pub const RETRIES_DEFAULT: u32 = 3;
/// The longest `concurrency.max_wait`: 24 hours, the shared-key stores' longest pause
/// (`DELAY_MS_MAX` in both packages), so a wait a key accepts is one its store can hold.
pub const MAX_WAIT_MS_MAX: u32 = 24 * 60 * 60 * 1_000;
/// Starts one rate window may count (`rate = "N/W"`: N is 1 to this).
pub const RATE_COUNT_MAX: u32 = 1_000_000_000;
/// Rate windows one key may carry (`rate = ["1/s", "2000/30d"]`).
pub const RATE_WINDOWS_MAX: usize = 8;
/// A key's `burst`: 1 to this.
pub const BURST_MAX: u32 = 1_000_000_000;
/// Keys one tool's calls may take at once (a key set, `concurrency = [{ key }, { key }]`).
pub const KEYS_PER_CALL_MAX: usize = 8;
/// Different arguments one key template may name (`key = "fs:{path}"` names one).
pub const PLACEHOLDERS_MAX: usize = 8;
/// Bytes of one call's arguments (JSON) given for a templated key. Hosts pass only the fields
/// the template names, so this bounds a document of a few short values.
pub const ARGUMENTS_BYTES_MAX: usize = 64 * 1024;
/// A shared key's limit at the store ([`crate::shared`]): 1 to this.
pub const SHARED_LIMIT_MAX: u32 = 1_000_000;
/// A shared key's rate window's count and burst at the store: 1 to this, so the stores'
/// arithmetic (`burst * per_ms` and below) stays exact in a double (Redis's Lua numbers).
pub const SHARED_RATE_COUNT_MAX: u32 = 1_000_000;
/// A shared key's delay, and a pause, at the store: at most 24 h.
pub const SHARED_DELAY_MS_MAX: u32 = 86_400_000;
/// A shared-key lease ([`crate::shared::LeaseSchedule`]): at least this (a renewal every
/// lease / 3 would come too often below it) ...
pub const LEASE_MS_MIN: u32 = 300;
/// ... and at most an hour (a dead process's permits are held that long).
pub const LEASE_MS_MAX: u32 = 3_600_000;
/// Tickets one renewal names (a store's `renew` takes at most this many).
pub const RENEW_TICKETS_MAX: usize = 1000;
/// Tickets one lease schedule holds at once (waiting, granted, or requested and unanswered).
pub const LEASE_TICKETS_MAX: usize = 100_000;
/// Grants one store operation makes at most (the SQLite loop and the Redis script stop there).
pub const GRANTS_PER_OPERATION_MAX: u32 = 10_000;
/// `simulate`: the longest execution, in ms (2^53 - 1, the largest whole number every host's
/// numbers hold exactly).
pub const SIMULATE_DURATION_MS_MAX: u64 = (1 << 53) - 1;
/// `simulate`: the most entries (calls, or operations of fan-out calls) one simulation runs;
/// its timeline inspects every waiting entry at every step.
pub const SIMULATE_ENTRIES_MAX: usize = 2_000;
