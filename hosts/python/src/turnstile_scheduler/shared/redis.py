"""The Redis store: processes on several machines share keys through one Redis server, with
redis-py's asyncio client (the optional extra: `pip install turnstile-scheduler[redis]`). Every
operation is ONE call of one Lua script (`EVALSHA`, loaded on first use), so it is atomic and one
round trip; the clock is the server's `TIME`, read inside the script.

Waiting does not poll, and a grant wakes only its own process: each store instance subscribes, on
a pub/sub connection, to a channel of its own (`P:wake:<random>`), and every ticket is requested
with that channel. When the script grants a ticket (other than a request's own, which the reply
carries) it publishes the grant to that ticket's channel; when the head left waiting is held
only by the delay or a pause, it tells the head's channel when to check again. So a grant costs
one message to one process, however many wait. A message lost to a reconnection is covered by a
`resync` wake-up and by the heartbeat.

Keys, for shared key K and prefix P (default `turnstile`), all with the hash tag `{K}` so a Redis
Cluster keeps them in one slot: `P:{K}:state`, `P:{K}:queue`, `P:{K}:leases`, `P:{K}:tickets`,
`P:{K}:held`. The script is the package's file from the repository's `shared/store/redis.lua`
(`_texts`): the JS store (`hosts/js/src/shared/redis.ts`) uses the same keys and the same
script, so both can share a server.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from typing import Any, Callable, Optional, Sequence

from . import Arrival, KeyInspection, Removal, SharedStoreError, StoreUnavailableError, Terms, TicketState, Wake
from ._texts import redis_script


class RedisStore:
    """A shared-key store on a Redis server (see the module doc)."""

    kind = "redis"

    @classmethod
    async def open(
        cls,
        url: str = "redis://127.0.0.1:6379",
        *,
        client: Any = None,
        prefix: str = "turnstile",
        op_timeout_ms: int = 2000,
    ) -> "RedisStore":
        """Connects to `url` (or takes `client`, a `redis.asyncio.Redis` made with
        `decode_responses=True`, not closed by `close()`). Raises `StoreUnavailableError` when
        the server cannot be reached within `op_timeout_ms`, `SharedStoreError` when redis-py
        is not installed."""
        try:
            import redis.asyncio as aioredis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as e:
            raise SharedStoreError(
                "client-missing", "the Redis store needs redis-py: pip install 'turnstile-scheduler[redis]'"
            ) from e
        own = client is None
        if own:
            timeout = op_timeout_ms / 1000
            client = aioredis.Redis.from_url(
                url,
                decode_responses=True,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                # A failed operation is not resent here: the heartbeat tries again.
                retry=Retry(NoBackoff(), 0),
            )
            try:
                await client.ping()
            except Exception as e:
                await client.aclose()
                raise StoreUnavailableError("redis", f"connect to {_redact(url)}: {e}") from e
        return cls(client, own, prefix)

    def __init__(self, client: Any, own: bool, prefix: str) -> None:
        """Use `RedisStore.open`."""
        self.prefix = prefix
        self._client = client
        self._own = own
        self._script = client.register_script(redis_script())
        self.channel = f"{prefix}:wake:{secrets.token_hex(8)}"
        """This instance's wake-up channel."""
        self._pubsub: Any = None
        self._reader: Optional[asyncio.Task[None]] = None
        self._watchers: dict[str, set[Callable[[Any], None]]] = {}
        self._subscribed: Optional[asyncio.Future[None]] = None
        self._closed = False

    def _keys(self, key: str) -> list[str]:
        base = f"{self.prefix}:{{{key}}}"
        return [f"{base}:state", f"{base}:queue", f"{base}:leases", f"{base}:tickets", f"{base}:held"]

    async def _call(self, what: str, key: str, *args: Any) -> Any:
        if self._closed:
            raise StoreUnavailableError("redis", f"{what}: the store is closed")
        from redis.exceptions import ResponseError

        try:
            return await self._script(keys=self._keys(key), args=[what, key, *args])
        except ResponseError as e:
            raise SharedStoreError("store-failed", f"redis {what}: {e}") from e
        except Exception as e:
            raise StoreUnavailableError("redis", f"{what}: {type(e).__name__}: {e}") from e

    async def request(self, key: str, ticket: str, terms: Terms) -> TicketState:
        rates = ",".join(f"{w.count}/{w.per_ms}/{w.burst}" for w in terms.rates) or "-"
        return _state(await self._call("request", key, ticket, terms.limit, terms.delay_ms, terms.lease_ms, self.channel, terms.weight, rates))

    async def renew(self, key: str, tickets: Sequence[str]) -> list[TicketState]:
        return [_state(row) for row in await self._call("renew", key, *tickets)]

    async def release(self, key: str, ticket: str) -> Removal:
        return await self._call("release", key, ticket)

    async def abandon(self, key: str, ticket: str) -> Removal:
        return await self._call("abandon", key, ticket)

    async def pause(self, key: str, for_ms: int) -> int:
        return int(await self._call("pause", key, for_ms))

    async def inspect(self, key: str) -> KeyInspection:
        out = await self._call("inspect", key)
        now, seq, grants, last, paused = (int(v) for v in out[:5])
        flat = [int(v) for v in out[5]]
        arrivals = sorted((Arrival(*flat[i : i + 4]) for i in range(0, len(flat) - 3, 4)), key=lambda a: (a.count, a.per_ms))
        rows = sorted(((r[0], int(r[1]), int(r[2]), int(r[3]), int(float(r[4]))) for r in out[6:]), key=lambda r: r[1])
        return KeyInspection(
            key=key,
            now_ms=now,
            seq=seq,
            grants=grants,
            last_grant_ms=last,
            paused_until_ms=paused,
            arrivals=tuple(arrivals),
            held=tuple((t, s, g, at, exp) for t, s, at, g, exp in rows if at > 0),
            waiting=tuple((t, s, exp) for t, s, at, _, exp in rows if at == 0),
        )

    def watch(self, key: str, tickets: Callable[[], Sequence[str]], wake: Callable[[Wake], None]) -> "_Watch":
        def listener(event: Any) -> None:
            if isinstance(event, Wake):
                wake(event)
                return
            parsed = _parse_wake(event, set(tickets()))
            if parsed is not None:
                wake(parsed)

        self._watchers.setdefault(key, set()).add(listener)
        return _Watch(self, key, listener, self._subscribe())

    def _subscribe(self) -> "asyncio.Future[None]":
        """Subscribes this instance's channel, once (a failed SUBSCRIBE is tried again next
        time); the future completes when the server confirmed it."""
        if self._subscribed is not None:
            return self._subscribed
        if self._pubsub is None:
            self._pubsub = self._client.pubsub()
        subscribed = self._subscribed = asyncio.get_running_loop().create_future()

        async def subscribe() -> None:
            try:
                await self._pubsub.subscribe(self.channel)
            except Exception as e:
                if self._subscribed is subscribed:
                    self._subscribed = None
                if not subscribed.done():
                    subscribed.set_exception(StoreUnavailableError("redis", f"subscribe: {e}"))
                return
            if self._reader is None:
                self._reader = asyncio.get_running_loop().create_task(self._read())

        self._spawn(subscribe())
        return subscribed

    def _unwatch(self, key: str, listener: Any) -> None:
        watchers = self._watchers.get(key)
        if watchers is not None:
            watchers.discard(listener)
            if not watchers:
                del self._watchers[key]

    async def _read(self) -> None:
        """The pub/sub reader: confirms subscriptions, hands messages to the watchers; after a
        lost connection it reconnects (redis-py resubscribes) and asks every watcher to resync."""
        lost = False
        while not self._closed:
            try:
                message = await self._pubsub.get_message(ignore_subscribe_messages=False, timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception:
                lost = True
                await asyncio.sleep(0.1)
                continue
            if lost:
                lost = False
                for watchers in list(self._watchers.values()):
                    for listener in list(watchers):
                        listener(Wake(resync=True))
            if message is None:
                continue
            if message.get("type") == "subscribe":
                if self._subscribed is not None and not self._subscribed.done():
                    self._subscribed.set_result(None)
            elif message.get("type") == "message":
                try:
                    m = json.loads(message.get("data") or "")
                except ValueError:
                    continue
                for listener in list(self._watchers.get(str(m.get("k")), ())):
                    listener(m)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        _tasks.add(task)
        task.add_done_callback(lambda t: (_tasks.discard(t), t.cancelled() or t.exception()))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._watchers.clear()
        if self._reader is not None:
            self._reader.cancel()
        if self._subscribed is not None and not self._subscribed.done():
            self._subscribed.cancel()
        if self._pubsub is not None:
            try:
                await self._pubsub.aclose()
            except Exception:
                pass
        if self._own:
            try:
                await self._client.aclose()
            except Exception:
                pass


class _Watch:
    def __init__(self, store: RedisStore, key: str, listener: Any, ready: "asyncio.Future[None]") -> None:
        self._store = store
        self._key = key
        self._listener = listener
        self.ready = asyncio.shield(ready)

    def stop(self) -> None:
        self._store._unwatch(self._key, self._listener)


_tasks: set[asyncio.Task[Any]] = set()


def _state(row: Sequence[Any]) -> TicketState:
    ticket, code = row[0], int(row[1])
    if code == 2:
        return TicketState(ticket, "granted", seq=int(row[2]), grant=int(row[3]), granted_ms=int(row[4]))
    if code == 1:
        retry = int(row[3])
        return TicketState(ticket, "waiting", seq=int(row[2]), retry_ms=retry if retry >= 0 else None)
    return TicketState(ticket, "lost")


def _parse_wake(m: dict[str, Any], mine: set[str]) -> Optional[Wake]:
    """A wake-up message (`{k: key, g: [[ticket, seq, grant, granted_ms]...], h: head, r: retry
    ms}`), kept to the tickets of `mine`; None when none of it concerns them."""
    granted = m.get("g") if isinstance(m.get("g"), list) else []
    states = [
        TicketState(g[0], "granted", seq=int(g[1]), grant=int(g[2]), granted_ms=int(g[3])) for g in granted if g[0] in mine
    ]
    head, retry_ms = m.get("h"), m.get("r")
    retry = (head, int(retry_ms)) if isinstance(head, str) and head in mine and isinstance(retry_ms, (int, float)) and retry_ms >= 0 else None
    if not states and retry is None:
        return None
    return Wake(states=states, retry=retry)


def _redact(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//***@", url)
