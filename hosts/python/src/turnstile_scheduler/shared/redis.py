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
`P:{K}:held`. The JS store (`hosts/js/src/shared/redis.ts`) uses the same keys and the same
`SCRIPT`, so both can share a server.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from typing import Any, Callable, Optional, Sequence

from . import KeyInspection, Removal, SharedStoreError, StoreUnavailableError, Terms, TicketState, Wake

SCRIPT = """-- Turnstile shared keys, script 1 (the same text in the JS and Python packages).
-- KEYS: state (hash: seq, grants, last_grant_ms, paused_until_ms), queue (zset: waiting ticket
-- -> seq), leases (zset: every ticket -> expiry ms), tickets (hash: ticket -> "seq limit delay
-- lease granted_ms grant channel"), held (zset: granted ticket -> grant).
-- ARGV: op, the key's name (for wake-ups), then the op's own.
-- Wake-ups go to the channel each ticket was requested with (one per store instance): a grant
-- to its ticket's channel (but a request's own grant, which its reply carries), and the waiting
-- head's retry time, when only the delay or a pause holds it, to the head's channel.
local state, queue, leases, tickets, held = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, name = ARGV[1], ARGV[2]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local changed = false
local head, head_retry = nil, -1
local notes, order = {}, {}

local function fields(id)
  local v = redis.call('HGET', tickets, id)
  if not v then return nil end
  local f = {}
  for word in string.gmatch(v, '%S+') do f[#f + 1] = word end
  for i = 1, 6 do f[i] = tonumber(f[i]) end
  return f
end

local function pack(f)
  return string.format('%d %d %d %d %d %d %s', f[1], f[2], f[3], f[4], f[5], f[6], f[7])
end

local function num(field)
  return tonumber(redis.call('HGET', state, field) or '0')
end

local function note(channel)
  if not notes[channel] then
    notes[channel] = {k = name, g = {}}
    order[#order + 1] = channel
  end
  return notes[channel]
end

local function drop(id)
  redis.call('ZREM', queue, id)
  redis.call('ZREM', held, id)
  redis.call('ZREM', leases, id)
  redis.call('HDEL', tickets, id)
end

local function purge()
  local dead = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(dead) do drop(id) end
  if #dead > 0 then changed = true end
end

local function promote(own)
  for _ = 1, 10000 do
    head, head_retry = redis.call('ZRANGE', queue, 0, 0)[1], -1
    if not head then return end
    local f = fields(head)
    if redis.call('ZCARD', held) >= f[2] then return end
    local gate = num('paused_until_ms')
    if f[3] > 0 then gate = math.max(gate, num('last_grant_ms') + f[3]) end
    if now < gate then
      head_retry = gate - now
      return
    end
    local grant = redis.call('HINCRBY', state, 'grants', 1)
    redis.call('HSET', state, 'last_grant_ms', now)
    f[5], f[6] = now, grant
    redis.call('HSET', tickets, head, pack(f))
    redis.call('ZREM', queue, head)
    redis.call('ZADD', held, grant, head)
    redis.call('ZADD', leases, now + f[4], head)
    changed = true
    if head ~= own then
      local g = note(f[7]).g
      g[#g + 1] = {head, f[1], grant, now}
    end
  end
  error('more than 10000 grants in one operation')
end

local function publish()
  if changed and head and head_retry >= 0 then
    local n = note(fields(head)[7])
    n.h, n.r = head, head_retry
  end
  for _, channel in ipairs(order) do
    redis.call('PUBLISH', channel, cjson.encode(notes[channel]))
  end
end

local function report(id)
  local f = fields(id)
  if not f then return {id, 0} end
  if f[5] > 0 then return {id, 2, f[1], f[6], f[5]} end
  local retry = -1
  if id == head then retry = head_retry end
  return {id, 1, f[1], retry}
end

if op == 'request' then
  local id = ARGV[3]
  purge()
  local f = fields(id)
  if f then
    redis.call('ZADD', leases, now + f[4], id)
  else
    local seq = redis.call('HINCRBY', state, 'seq', 1)
    local lease = tonumber(ARGV[6])
    redis.call('HSET', tickets, id, pack({seq, tonumber(ARGV[4]), tonumber(ARGV[5]), lease, 0, 0, ARGV[7]}))
    redis.call('ZADD', queue, seq, id)
    redis.call('ZADD', leases, now + lease, id)
  end
  promote(id)
  publish()
  return report(id)
elseif op == 'renew' then
  purge()
  for i = 3, #ARGV do
    local f = fields(ARGV[i])
    if f then redis.call('ZADD', leases, now + f[4], ARGV[i]) end
  end
  promote(nil)
  publish()
  local out = {}
  for i = 3, #ARGV do out[#out + 1] = report(ARGV[i]) end
  return out
elseif op == 'release' or op == 'abandon' then
  local id = ARGV[3]
  purge()
  local f = fields(id)
  local removal = 'lost'
  if f then
    if f[5] > 0 then removal = 'released' else removal = 'withdrawn' end
    drop(id)
    changed = true
  end
  promote(nil)
  publish()
  return removal
elseif op == 'pause' then
  local till = now + tonumber(ARGV[3])
  if till > num('paused_until_ms') then redis.call('HSET', state, 'paused_until_ms', till) end
  return num('paused_until_ms')
elseif op == 'inspect' then
  local out = {now, num('seq'), num('grants'), num('last_grant_ms'), num('paused_until_ms')}
  for _, id in ipairs(redis.call('ZRANGE', leases, 0, -1)) do
    local f = fields(id)
    if f then out[#out + 1] = {id, f[1], f[5], f[6], tonumber(redis.call('ZSCORE', leases, id))} end
  end
  return out
end
error('unknown op ' .. tostring(op))
"""
"""The script, byte for byte the same as the JS store's `SCRIPT`."""


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
        self._script = client.register_script(SCRIPT)
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
        return _state(await self._call("request", key, ticket, terms.limit, terms.delay_ms, terms.lease_ms, self.channel))

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
        rows = sorted(((r[0], int(r[1]), int(r[2]), int(r[3]), int(float(r[4]))) for r in out[5:]), key=lambda r: r[1])
        return KeyInspection(
            key=key,
            now_ms=now,
            seq=seq,
            grants=grants,
            last_grant_ms=last,
            paused_until_ms=paused,
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
