//! Results that cross in parts, joined: a round of `next-releases` (`releases.more`), an
//! export of `unfinished(part)` and a batch's `inspect(batch, from)`. What every host writes
//! once around the three calls.

use wasmtime::AsContextMut;
use wasmtime::component::ResourceAny;

use crate::wit_scheduler as ws;

/// `next-releases` until the round's last part, its parts joined into one `releases` (`more`
/// false). `now` is given to every call; the component reads it only at the first.
pub fn next_releases(
    iface: &ws::GuestScheduler<'_>,
    mut store: impl AsContextMut,
    s: ResourceAny,
    now: Option<u64>,
) -> wasmtime::Result<ws::Releases> {
    let mut out = iface.call_next_releases(&mut store, s, now)?;
    while out.more {
        let part = iface.call_next_releases(&mut store, s, now)?;
        debug_assert!(part.refused.is_none(), "refused is in the first part only");
        out.abort.extend(part.abort);
        out.pause_store.extend(part.pause_store);
        out.release.extend(part.release);
        out.settled.extend(part.settled);
        out.acquire.extend(part.acquire);
        out.start.extend(part.start);
        out.retired.extend(part.retired);
        out.wake_at = part.wake_at;
        out.more = part.more;
    }
    Ok(out)
}

/// `unfinished` part by part, joined: the first part's header and every part's batches, a
/// batch split between two parts made one.
pub fn unfinished(
    iface: &ws::GuestScheduler<'_>,
    mut store: impl AsContextMut,
    s: ResourceAny,
) -> wasmtime::Result<Result<ws::SavedState, ws::UnfinishedError>> {
    let first = match iface.call_unfinished(&mut store, s, 0)? {
        Ok(part) => part,
        Err(e) => return Ok(Err(e)),
    };
    let mut state = first.state;
    for k in 1..first.parts {
        let part = match iface.call_unfinished(&mut store, s, k)? {
            Ok(part) => part,
            Err(e) => return Ok(Err(e)),
        };
        let mut batches = part.state.batches.into_iter();
        if let Some(head) = batches.next() {
            match state.batches.last_mut() {
                Some(last) if last.batch == head.batch => last.calls.extend(head.calls),
                _ => state.batches.push(head),
            }
        }
        state.batches.extend(batches);
    }
    Ok(Ok(state))
}

/// The most statuses one `inspect` result carries.
const INSPECT_PART_MAX: usize = 1 << 16;

/// `inspect` from the first entry until a part that is not full, joined.
pub fn inspect(
    iface: &ws::GuestScheduler<'_>,
    mut store: impl AsContextMut,
    s: ResourceAny,
    batch: u64,
) -> wasmtime::Result<Option<Vec<ws::EntryStatus>>> {
    let Some(mut all) = iface.call_inspect(&mut store, s, batch, 0)? else {
        return Ok(None);
    };
    let mut last = all.len();
    while last == INSPECT_PART_MAX {
        let from = u32::try_from(all.len()).unwrap_or(u32::MAX);
        let part = iface
            .call_inspect(&mut store, s, batch, from)?
            .unwrap_or_default();
        last = part.len();
        all.extend(part);
    }
    Ok(Some(all))
}
