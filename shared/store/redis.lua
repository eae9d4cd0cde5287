-- Turnstile shared keys, script 1 (the engine's text: every host reads it from the component).
-- KEYS: state (hash: seq, grants, last_grant_ms, paused_until_ms, delay_max_ms, rested_ms, and
-- per rate window `r:COUNT/PER_MS` -> "at_ms rest"), queue (zset: waiting ticket -> seq), leases
-- (zset: every ticket -> expiry ms), tickets (hash: ticket -> "seq limit delay lease granted_ms
-- grant channel weight rates", rates "COUNT/PER_MS/BURST,..." or "-"), held (zset: granted
-- ticket -> grant).
-- A rate window is GCRA as the component keeps it (engine/src/schedule/rate.rs, the grant rule's
-- table tests/shared/grant-rule.txt): the arrival time is at_ms + rest / COUNT, so every number
-- here stays an integer below 2^53 (counts and bursts are at most 1000000).
-- ARGV: op, the key's name (for wake-ups), then the op's own.
-- Wake-ups go to the channel each ticket was requested with (one per store instance): a grant
-- to its ticket's channel (but a request's own grant, which its reply carries), and the waiting
-- head's retry time, when only the delay or a pause holds it, to the head's channel.
-- Idle keys are forgotten: after every write, the key's five Redis keys expire at the time the
-- key becomes idle (its last lease expiry, its pause's end, its last grant plus the longest
-- delay granted, its rate windows' arrival times), or are deleted when that has passed; a key
-- no process touches again leaves.
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
  if f[8] then f[8] = tonumber(f[8]) end
  return f
end

local function pack(f)
  return string.format('%d %d %d %d %d %d %s %d %s', f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8] or 1, f[9] or '-')
end

local function num(field)
  return tonumber(redis.call('HGET', state, field) or '0')
end

-- Floor division and remainder of integers a double holds exactly.
local function divmod(n, d)
  local q = math.floor(n / d)
  local r = n - q * d
  if r < 0 then q, r = q - 1, r + d elseif r >= d then q, r = q + 1, r - d end
  return q, r
end

-- The head's rate windows with the key's arrival times: {count, per_ms, burst, at_ms, rest}.
local function windows(f)
  local out = {}
  if not f[9] or f[9] == '-' then return out end
  for c, p, b in string.gmatch(f[9], '(%d+)/(%d+)/(%d+)') do
    local w = {tonumber(c), tonumber(p), tonumber(b), 0, 0}
    local at = redis.call('HGET', state, 'r:' .. c .. '/' .. p)
    if at then
      local a, r = string.match(at, '(%d+) (%d+)')
      w[4], w[5] = tonumber(a), tonumber(r)
    end
    out[#out + 1] = w
  end
  return out
end

-- When window w lets a start of `weight` units through: ceil((tat - (burst - weight) * per) / count).
local function opens(w, weight)
  local q, r = divmod(w[5] - (w[3] - weight) * w[2], w[1])
  if r > 0 then q = q + 1 end
  return w[4] + q
end

-- Moves window w's arrival time past a start at now: from the arrival time while it is less
-- than one ms behind now (on the pace), else from now (the key was idle); plus weight intervals.
local function started(w, weight)
  local at, rest = now, 0
  if w[4] >= now or (w[4] == now - 1 and w[5] > 0) then at, rest = w[4], w[5] end
  local q, r = divmod(rest + weight * w[2], w[1])
  at = at + q
  redis.call('HSET', state, 'r:' .. w[1] .. '/' .. w[2], string.format('%d %d', at, r))
  if at + 2 > num('rested_ms') then redis.call('HSET', state, 'rested_ms', at + 2) end
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
    local weight = f[8] or 1
    local rates = windows(f)
    for _, w in ipairs(rates) do gate = math.max(gate, opens(w, weight)) end
    if now < gate then
      head_retry = gate - now
      return
    end
    for _, w in ipairs(rates) do started(w, weight) end
    local grant = redis.call('HINCRBY', state, 'grants', 1)
    redis.call('HSET', state, 'last_grant_ms', now)
    if f[3] > num('delay_max_ms') then redis.call('HSET', state, 'delay_max_ms', f[3]) end
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

local function settle()
  local idle = math.max(num('paused_until_ms'), num('last_grant_ms') + num('delay_max_ms'), num('rested_ms'))
  local last = redis.call('ZRANGE', leases, -1, -1, 'WITHSCORES')
  if last[2] then idle = math.max(idle, tonumber(last[2])) end
  if idle <= now then
    redis.call('DEL', state, queue, leases, tickets, held)
  else
    for _, k in ipairs({state, queue, leases, tickets, held}) do redis.call('PEXPIREAT', k, idle) end
  end
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

-- A request's terms, checked before anything is written (a ticket the rule cannot read would
-- stop every later grant on its key): the component's ranges (engine/src/shared/grant.rs).
local function check_terms(limit, delay, weight, rates)
  local function whole(n, lo, hi) return n ~= nil and n == math.floor(n) and n >= lo and n <= hi end
  if not whole(limit, 1, 1000000) then error('limit ' .. tostring(ARGV[4]) .. ' is not in 1 ..= 1000000') end
  if not whole(delay, 0, 86400000) then error('delay ' .. tostring(ARGV[5]) .. ' is not in 0 ..= 86400000') end
  local seen, n, least = {}, 0, 1000000
  if rates ~= '-' then
    for w in string.gmatch(rates, '[^,]+') do
      local c, p, b = string.match(w, '^(%d+)/(%d+)/(%d+)$')
      c, p, b = tonumber(c), tonumber(p), tonumber(b)
      if not (whole(c, 1, 1000000) and whole(p, 1, 4294967295) and whole(b, 1, 1000000)) then
        error('rate window ' .. w .. ' is not a count and burst in 1 ..= 1000000 per at least 1 ms')
      end
      if seen[c .. '/' .. p] then error('rate window ' .. c .. '/' .. p .. ' is named twice') end
      seen[c .. '/' .. p], n, least = true, n + 1, math.min(least, b)
    end
  end
  if n > 8 then error(n .. ' rate windows, above 8') end
  if n == 0 then least = 1 end
  if not whole(weight, 1, least) then error('weight ' .. tostring(ARGV[8]) .. ' is not in 1 ..= ' .. least) end
end

if op == 'request' then
  local id = ARGV[3]
  check_terms(tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[8] or '1'), ARGV[9] or '-')
  purge()
  local f = fields(id)
  if f then
    redis.call('ZADD', leases, now + f[4], id)
  else
    local seq = redis.call('HINCRBY', state, 'seq', 1)
    local lease = tonumber(ARGV[6])
    redis.call('HSET', tickets, id, pack({seq, tonumber(ARGV[4]), tonumber(ARGV[5]), lease, 0, 0, ARGV[7], tonumber(ARGV[8] or '1'), ARGV[9] or '-'}))
    redis.call('ZADD', queue, seq, id)
    redis.call('ZADD', leases, now + lease, id)
  end
  promote(id)
  publish()
  local out = report(id)
  settle()
  return out
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
  settle()
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
  settle()
  return removal
elseif op == 'pause' then
  local till = now + tonumber(ARGV[3])
  if till > num('paused_until_ms') then redis.call('HSET', state, 'paused_until_ms', till) end
  local until_ms = num('paused_until_ms')
  settle()
  return until_ms
elseif op == 'inspect' then
  local arrivals = {}
  local fields_ = redis.call('HGETALL', state)
  for i = 1, #fields_, 2 do
    local c, p = string.match(fields_[i], '^r:(%d+)/(%d+)$')
    if c then
      local a, r = string.match(fields_[i + 1], '(%d+) (%d+)')
      for _, v in ipairs({c, p, a, r}) do arrivals[#arrivals + 1] = tonumber(v) end
    end
  end
  local out = {now, num('seq'), num('grants'), num('last_grant_ms'), num('paused_until_ms'), arrivals}
  for _, id in ipairs(redis.call('ZRANGE', leases, 0, -1)) do
    local f = fields(id)
    if f then out[#out + 1] = {id, f[1], f[5], f[6], tonumber(redis.call('ZSCORE', leases, id))} end
  end
  return out
end
error('unknown op ' .. tostring(op))
