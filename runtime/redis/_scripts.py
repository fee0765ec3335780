"""The Lua scripts that change a Redis topic's state, each one atomic step.

Every step that must not be seen half done is one script: a publish (checks, entries,
counters), a settlement (the fence, the ack or the dead letter, the outcome), a reclaim
(expired and handed-back deliveries to a new holder or to the dead letters), a release
(a member's deliveries handed back), a broadcast reader's attach (registered, its cursor at
the stream's end), a drain of the dead letters. Their keys are one partition's
(`TopicKeys`), in one hash slot: no transaction is needed, also on a Redis Cluster.

Encodings shared with Python (`runtime.redis._records`):

- optional text: ``""`` for None, else ``"." + text``;
- a nack record: ``destination US reason US optional-error RS``;
- the delivery count of a pending entry is the attempt of its holder; a handed-back entry
  is parked with an idle time of `BIG_IDLE` milliseconds and the count its next claim
  must start from.
"""

from __future__ import annotations

__all__ = ["ACK_THROUGH", "ATTACH", "BIG_IDLE", "BURY", "BURY_READ", "CREATE_GROUP", "DECLARE",
           "DELETE_GROUP", "DRAIN", "FENCE", "GIVE_BACK", "HEARTBEAT", "LEASE", "PUBLISH",
           "READER_DETACH", "READER_REAP", "READER_SETTLE", "READER_TOUCH", "RECLAIM", "RELEASE",
           "REPLAY", "SETTLE", "STAGED_COMMIT", "STREAM_END", "TAKE_PLAN", "TAKE_RANGE", "TRIM",
           "UNLEASE"]

BIG_IDLE = 1 << 40
"""The idle time (ms) of a parked entry: far past any ack deadline, so every reclaim sees
it, and above `_PARKED_IDLE`, so a reclaim tells it from an expired one."""

_PARKED_IDLE = 1 << 39
_SETTLED_LENGTH = 100_000  # settled records kept for outcome watchers (approximate)

_SETTLING = f"""
local stream, stats, remaining, failed, dead, settled = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local PARKED, BIG, PARKED_IDLE = '__parked', {BIG_IDLE}, {_PARKED_IDLE}
local acked = {{}}
-- No message of the topic waits for several groups (the common one-group topic): no
-- per-message look at `remaining`.
local multi = redis.call('HLEN', remaining) > 0
local function nack_record(destination, reason, err)
  return destination .. '\\31' .. reason .. '\\31' .. err .. '\\30'
end
local function complete(id, nack)
  -- Only a message published to several groups has a `remaining` count (and, once one
  -- of them nacked it, `failed` nacks).
  local nacks = nack
  if multi and redis.call('HEXISTS', remaining, id) == 1 then
    local left = redis.call('HINCRBY', remaining, id, -1)
    if left > 0 then
      if nack then redis.call('HSET', failed, id, (redis.call('HGET', failed, id) or '') .. nack) end
      return
    end
    redis.call('HDEL', remaining, id)
    local earlier = redis.call('HGET', failed, id)
    if earlier then
      redis.call('HDEL', failed, id)
      nacks = earlier .. (nack or '')
    end
  end
  if nacks then
    redis.call('HINCRBY', stats, 'pending', -1)
    redis.call('XADD', settled, 'MAXLEN', '~', {_SETTLED_LENGTH}, '*', 'i', id, 'n', nacks)
  else
    acked[#acked + 1] = id
  end
end
-- The acked messages' counters and their settled record: once per script call.
local function flush_acked()
  if #acked > 0 then
    redis.call('HINCRBY', stats, 'pending', -#acked)
    redis.call('HINCRBY', stats, 'delivered', #acked)
    redis.call('XADD', settled, 'MAXLEN', '~', {_SETTLED_LENGTH}, '*', 'a', table.concat(acked, ','))
  end
end
local function bury(id, group, sid, reason, err, attempts, exc, tb, dead_limit)
  local fields = {{'m', id, 'g', group, 's', sid, 'r', reason, 'e', err, 'n', attempts,
                  'x', exc, 't', tb}}
  local entry = redis.call('XRANGE', stream, id, id)
  if #entry > 0 then
    local body = entry[1][2]
    for i = 1, #body do fields[#fields + 1] = body[i] end
  end
  if dead_limit > 0 then
    redis.call('XADD', dead, 'MAXLEN', dead_limit, '*', unpack(fields))
  else
    redis.call('XADD', dead, '*', unpack(fields))
  end
  redis.call('HINCRBY', stats, 'dead_lettered', 1)
end
local function holder_sid(owner)
  return string.match(owner, ':(%-?%d+)$') or '-1'
end
"""

PUBLISH = """
local stream, groups, readers, stats, remaining, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local max_pending, dead_limit, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local throttled = tonumber(ARGV[4])  -- publishes the throttle delayed (counted here)
-- ARGV[5]: 'p' (plain: n bodies of Messages with no key or attributes follow) or
-- 'm' (mixed: body, format, key, attributes per message)
local plain = ARGV[5] == 'p'
local stride = 4
if plain then stride = 1 end
local names = redis.call('SMEMBERS', groups)
local ngroups = #names
-- A broadcast reader is a consumer group of its own, created at its attach (a
-- step with its entry in `readers`), so it reads every entry added while it is there.
local nreaders = redis.call('HLEN', readers)
local pending = 0
if max_pending > 0 and ngroups + nreaders > 0 then
  pending = tonumber(redis.call('HGET', stats, 'pending') or '0')
  if pending >= max_pending then return {'full', pending} end
end
redis.call('HINCRBY', stats, 'published', n)
if throttled > 0 then redis.call('HINCRBY', stats, 'throttled', throttled) end
local out = {'ok', ngroups, nreaders, pending + n}
for i = 1, ngroups do out[#out + 1] = names[i] end
if ngroups == 0 and nreaders == 0 then
  out[1] = 'none'
  for i = 0, n - 1 do
    local b = 6 + i * stride
    local fields = {'m', '', 'g', '', 's', '-1', 'r', 'no_subscribers', 'e', '', 'n', '0',
                    'x', '', 't', '', 'b', ARGV[b]}
    if not plain then
      for _, f in ipairs({'f', ARGV[b + 1], 'k', ARGV[b + 2], 'a', ARGV[b + 3]}) do
        fields[#fields + 1] = f
      end
    end
    if dead_limit > 0 then
      out[#out + 1] = redis.call('XADD', dead, 'MAXLEN', dead_limit, '*', unpack(fields))
    else
      out[#out + 1] = redis.call('XADD', dead, '*', unpack(fields))
    end
  end
  redis.call('HINCRBY', stats, 'nacked', n)
  redis.call('HINCRBY', stats, 'dead_lettered', n)
  return out
end
for i = 0, n - 1 do
  local b = 6 + i * stride
  local id
  if plain then
    id = redis.call('XADD', stream, '*', 'b', ARGV[b])
  else
    id = redis.call('XADD', stream, '*', 'b', ARGV[b], 'f', ARGV[b + 1], 'k', ARGV[b + 2],
                    'a', ARGV[b + 3])
  end
  out[#out + 1] = id
  -- Every group and every reader attached now settles it once.
  if ngroups + nreaders > 1 then redis.call('HSET', remaining, id, ngroups + nreaders) end
end
redis.call('HINCRBY', stats, 'pending', n)
return out
"""

SETTLE = _SETTLING + """
local group, consumer, sid = ARGV[1], ARGV[2], ARGV[3]
local tmo, max_attempts, dead_limit = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local out = {}
local to_ack = {}
-- acks: a count, then (id, attempt) pairs
local acks = tonumber(ARGV[7])
-- This consumer's pending entries, looked up once for a batch of acks (it holds little
-- more than what it acks); an id not among them is looked up alone.
local held = {}
if acks > 1 then
  for _, p in ipairs(redis.call('XPENDING', stream, group, '-', '+', acks + 256, consumer)) do
    held[p[1]] = p
  end
end
local function fence(id, attempt)
  local p = held[id] or redis.call('XPENDING', stream, group, id, id, 1)[1]
  if not p then return 'gone' end
  if p[2] ~= consumer or p[4] ~= attempt then return 'taken' end
  if tmo > 0 and p[3] >= tmo then return 'late' end
  return 'ok'
end
for i = 0, acks - 1 do
  local id = ARGV[8 + i * 2]
  local state = fence(id, tonumber(ARGV[9 + i * 2]))
  out[#out + 1] = state
  if state == 'ok' then
    to_ack[#to_ack + 1] = id
    complete(id, nil)
  end
end
-- nacks: a count, then (id, attempt, kind, reason, error, exception, traceback) each
local base = 8 + acks * 2
local nacks = tonumber(ARGV[base])
for i = 0, nacks - 1 do
  local b = base + 1 + i * 7
  local id, attempt, kind = ARGV[b], tonumber(ARGV[b + 1]), ARGV[b + 2]
  local state = fence(id, attempt)
  out[#out + 1] = state
  if state == 'ok' then
    local reason, err = ARGV[b + 3], ARGV[b + 4]
    redis.call('HINCRBY', stats, 'nacked', 1)
    if kind == 'n' and attempt < max_attempts then
      redis.call('XCLAIM', stream, group, PARKED, 0, id, 'IDLE', BIG, 'JUSTID')
      redis.call('HINCRBY', stats, 'redelivered', 1)
    else
      to_ack[#to_ack + 1] = id
      bury(id, group, sid, reason, err, attempt, ARGV[b + 5], ARGV[b + 6], dead_limit)
      complete(id, nack_record('group:' .. group, reason, err))
    end
  end
end
if #to_ack > 0 then redis.call('XACK', stream, group, unpack(to_ack)) end
flush_acked()
return out
"""

RECLAIM = _SETTLING + """
local group, consumer = ARGV[1], ARGV[2]
local tmo, max_attempts, dead_limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local count = tonumber(ARGV[6])
-- ARGV[7] 't' (take over): every entry another consumer holds counts as expired (its
-- owner's lease ran out), whatever its idle time.
local takeover = ARGV[7] == 't'
local min_idle = PARKED_IDLE
if tmo > 0 then min_idle = tmo end
if takeover then min_idle = 0 end
local pending = redis.call('XPENDING', stream, group, 'IDLE', min_idle, '-', '+', count)
local out = {}
local to_ack = {}
for _, p in ipairs(pending) do
  local id, owner, idle, times = p[1], p[2], tonumber(p[3]), tonumber(p[4])
  local parked = idle >= PARKED_IDLE
  if takeover and owner == consumer then
    -- already ours
  elseif not parked and times >= max_attempts then
    redis.call('HINCRBY', stats, 'timed_out', 1)
    to_ack[#to_ack + 1] = id
    bury(id, group, holder_sid(owner), 'timeout', '', times, '', '', dead_limit)
    complete(id, nack_record('group:' .. group, 'timeout', ''))
  else
    if not parked then redis.call('HINCRBY', stats, 'timed_out', 1) end
    local got = redis.call('XCLAIM', stream, group, consumer, 0, id)
    if #got > 0 then
      if not parked then redis.call('HINCRBY', stats, 'redelivered', 1) end
      out[#out + 1] = {id, got[1][2], times + 1}
    else
      complete(id, nack_record('group:' .. group, 'error', '.the entry was deleted from the stream'))
    end
  end
end
if #to_ack > 0 then redis.call('XACK', stream, group, unpack(to_ack)) end
flush_acked()
return out
"""

RELEASE = _SETTLING + """
local group, consumer, running = ARGV[1], ARGV[2], ARGV[3]
local max_attempts, dead_limit = tonumber(ARGV[4]), tonumber(ARGV[5])
local held = redis.call('XPENDING', stream, group, '-', '+', 100000, consumer)
local to_ack = {}
local crashed = 0
for _, p in ipairs(held) do
  local id, times = p[1], tonumber(p[4])
  if id == running then
    crashed = 1
    redis.call('HINCRBY', stats, 'nacked', 1)
    if times >= max_attempts then
      to_ack[#to_ack + 1] = id
      bury(id, group, holder_sid(consumer), 'worker_crashed', '', times, '', '', dead_limit)
      complete(id, nack_record('group:' .. group, 'worker_crashed', ''))
    else
      redis.call('XCLAIM', stream, group, PARKED, 0, id, 'IDLE', BIG, 'JUSTID')
      redis.call('HINCRBY', stats, 'redelivered', 1)
    end
  else
    redis.call('XCLAIM', stream, group, PARKED, 0, id, 'IDLE', BIG, 'RETRYCOUNT', times - 1, 'JUSTID')
  end
end
if #to_ack > 0 then redis.call('XACK', stream, group, unpack(to_ack)) end
flush_acked()
redis.call('XGROUP', 'DELCONSUMER', stream, group, consumer)
return {#held, crashed}
"""

GIVE_BACK = f"""
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local PARKED, BIG = '__parked', {BIG_IDLE}
-- (id, attempt) pairs a member read and never started: each one it still holds at that
-- attempt is parked with no attempt counted (the next claim starts from the same count).
local back = 0
for i = 3, #ARGV, 2 do
  local id, attempt = ARGV[i], tonumber(ARGV[i + 1])
  local p = redis.call('XPENDING', stream, group, id, id, 1)[1]
  if p and p[2] == consumer and p[4] == attempt then
    redis.call('XCLAIM', stream, group, PARKED, 0, id, 'IDLE', BIG, 'RETRYCOUNT', attempt - 1, 'JUSTID')
    back = back + 1
  end
end
return back
"""

CREATE_GROUP = """
local stream, groups = KEYS[1], KEYS[2]
if redis.call('SISMEMBER', groups, ARGV[1]) == 1 then return 0 end
redis.pcall('XGROUP', 'CREATE', stream, ARGV[1], '$', 'MKSTREAM')
redis.call('SADD', groups, ARGV[1])
return 1
"""

DELETE_GROUP = _SETTLING + """
local groups = KEYS[7]
local group = ARGV[1]
if redis.call('SREM', groups, group) == 0 then return 0 end
local record = nack_record('group:' .. group, 'unsubscribed', '')
local last = nil
for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  for i = 1, #info, 2 do
    if info[i] == 'name' and info[i + 1] == group then
      for j = 1, #info, 2 do
        if info[j] == 'last-delivered-id' then last = info[j + 1] end
      end
    end
  end
end
for _, p in ipairs(redis.call('XPENDING', stream, group, '-', '+', 1000000)) do
  complete(p[1], record)
end
if last then
  for _, e in ipairs(redis.call('XRANGE', stream, '(' .. last, '+')) do complete(e[1], record) end
end
redis.call('XGROUP', 'DESTROY', stream, group)
flush_acked()
return 1
"""

TRIM = """
local stream, groups = KEYS[1], KEYS[2]
local names = redis.call('SMEMBERS', groups)
if #names == 0 or redis.call('EXISTS', stream) == 0 then return 0 end
local floor = nil
local function older(a, b)
  local am, as = string.match(a, '(%d+)-(%d+)')
  local bm, bs = string.match(b, '(%d+)-(%d+)')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local name, last = nil, nil
  for i = 1, #info, 2 do
    if info[i] == 'name' then name = info[i + 1] end
    if info[i] == 'last-delivered-id' then last = info[i + 1] end
  end
  local first = redis.call('XPENDING', stream, name)[2]
  local keep = last
  if first then keep = first end
  if floor == nil or older(keep, floor) then floor = keep end
end
if floor == nil then return 0 end
return redis.call('XTRIM', stream, 'MINID', '~', floor)
"""

LEASE = """
-- The lease of one partition of a group: renew it when ARGV[1] holds it (1), take it when
-- nobody does (2), else 0.
local key, name, ms = KEYS[1], ARGV[1], ARGV[2]
local held = redis.call('GET', key)
if held == name then
  redis.call('PEXPIRE', key, ms)
  return 1
end
if not held then
  redis.call('SET', key, name, 'PX', ms)
  return 2
end
return 0
"""

UNLEASE = """
-- Give a partition's lease back, if ARGV[1] still holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

HEARTBEAT = """
-- A member of a group says it lives for ARGV[2] ms more (or leaves, ARGV[3] = 'leave');
-- returns how many members live.
local key, name, ms = KEYS[1], ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if ARGV[3] == 'leave' then
  redis.call('ZREM', key, name)
else
  redis.call('ZADD', key, now + ms, name)
  redis.call('PEXPIRE', key, ms * 10)
end
return redis.call('ZCARD', key)
"""

DECLARE = """
local settings = KEYS[1]
if redis.call('EXISTS', settings) == 1 then return redis.call('HGETALL', settings) end
redis.call('HSET', settings, unpack(ARGV))
return {}
"""

BURY = """
local dead, stats = KEYS[1], KEYS[2]
local dead_limit = tonumber(ARGV[1])
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
if dead_limit > 0 then
  redis.call('XADD', dead, 'MAXLEN', dead_limit, '*', unpack(fields))
else
  redis.call('XADD', dead, '*', unpack(fields))
end
redis.call('HINCRBY', stats, 'nacked', 1)
redis.call('HINCRBY', stats, 'dead_lettered', 1)
return 1
"""

REPLAY = """
local stream, groups, stats = KEYS[1], KEYS[2], KEYS[3]
local group = ARGV[1]
if redis.call('SISMEMBER', groups, group) == 0 then return false end
local id = redis.call('XADD', stream, '*', 'b', ARGV[3], 'f', ARGV[4], 'k', ARGV[5], 'a', ARGV[6],
                      'r', ARGV[2], 'o', group)
redis.call('HINCRBY', stats, 'pending', 1)
return id
"""

ATTACH = """
-- A broadcast reader joins: its name in `readers` and a consumer group of its own at the
-- stream's end, in one step, so a publish either comes before (and does not count it) or
-- after (and counts it, and the reader reads it). ARGV[2] 'anew': attach only while the
-- stream exists (a reader never brings a destroyed topic back); returns 0 then, else 1.
local stream, readers, name = KEYS[1], KEYS[2], ARGV[1]
if ARGV[2] == 'anew' and redis.call('EXISTS', stream) == 0 then return 0 end
local t = redis.call('TIME')
redis.call('HSET', readers, name, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('XGROUP', 'CREATE', stream, name, '$', 'MKSTREAM')
redis.call('XGROUP', 'CREATECONSUMER', stream, name, name)
return 1
"""

DRAIN = """
local entries = redis.call('XRANGE', KEYS[1], '-', '+')
redis.call('DEL', KEYS[1])
return entries
"""

_READERS = _SETTLING + """
local readers = KEYS[7]
-- Whether a stream entry is a message readers were counted for (a replay is for one group).
local function counted(id)
  local entry = redis.call('XRANGE', stream, id, id)
  if #entry == 0 then return true end
  local fields = entry[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 'o' then return false end
  end
  return true
end
-- The reader `name` leaves: its share of every message it holds or has not read yet
-- completes with a nack `reason` (the held ones dead-lettered with `bury_held`), counted
-- under `counter`. Returns how many.
local function drop_reader(name, reason, counter, bury_held, dead_limit)
  redis.call('HDEL', readers, name)
  local infos = redis.pcall('XINFO', 'GROUPS', stream)
  if infos.err then return 0 end
  local last = nil
  for _, info in ipairs(infos) do
    local found, at = false, nil
    for i = 1, #info, 2 do
      if info[i] == 'name' and info[i + 1] == name then found = true end
      if info[i] == 'last-delivered-id' then at = info[i + 1] end
    end
    if found then last = at end
  end
  if last == nil then return 0 end
  local sid = holder_sid(name)
  local record = nack_record('subscriber:' .. sid, reason, '')
  local count = 0
  for _, p in ipairs(redis.call('XPENDING', stream, name, '-', '+', 1000000)) do
    if counted(p[1]) then
      if bury_held then bury(p[1], '', sid, reason, '', 1, '', '', dead_limit) end
      complete(p[1], record)
      count = count + 1
    end
  end
  for _, e in ipairs(redis.call('XRANGE', stream, '(' .. last, '+')) do
    local replay = false
    for i = 1, #e[2], 2 do
      if e[2][i] == 'o' then replay = true end
    end
    if not replay then
      complete(e[1], record)
      count = count + 1
    end
  end
  redis.call('XGROUP', 'DESTROY', stream, name)
  if count > 0 then redis.call('HINCRBY', stats, counter, count) end
  return count
end
"""

READER_SETTLE = _SETTLING + """
local name, sid, dead_limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local id, kind, reason, err = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
-- The fence: an entry the reader no longer holds (timed out, the reader dropped) is not its.
if redis.call('XACK', stream, name, id) == 0 then return 'taken' end
if kind == 'a' then
  complete(id, nil)
else
  redis.call('HINCRBY', stats, 'nacked', 1)
  bury(id, '', sid, reason, err, 1, ARGV[8], ARGV[9], dead_limit)
  complete(id, nack_record('subscriber:' .. sid, reason, err))
end
flush_acked()
return 'ok'
"""

READER_DETACH = _READERS + """
local count = drop_reader(ARGV[1], 'unsubscribed', 'nacked', false, 0)
flush_acked()
return count
"""

READER_TOUCH = """
-- A reader says it reads now (when it still is one: a reader presumed gone stays gone).
local t = redis.call('TIME')
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return 1
"""

READER_REAP = _READERS + """
-- Readers presumed gone (no read for the ack deadline) leave with their share `timeout`;
-- a live reader's deliveries held past the deadline time out (dead-lettered, never
-- redelivered: broadcast).
local tmo, dead_limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local count = 0
local seen = redis.call('HGETALL', readers)
for i = 1, #seen, 2 do
  local name, last = seen[i], tonumber(seen[i + 1])
  if now - last >= tmo then
    count = count + drop_reader(name, 'timeout', 'timed_out', true, dead_limit)
  else
    local sid = holder_sid(name)
    local held = redis.pcall('XPENDING', stream, name, 'IDLE', tmo, '-', '+', 1000)
    if held.err then
      redis.call('HDEL', readers, name)
    else
      for _, p in ipairs(held) do
        redis.call('XACK', stream, name, p[1])
        if counted(p[1]) then
          redis.call('HINCRBY', stats, 'timed_out', 1)
          bury(p[1], '', sid, 'timeout', '', 1, '', '', dead_limit)
          complete(p[1], nack_record('subscriber:' .. sid, 'timeout', ''))
          count = count + 1
        end
      end
    end
  end
end
flush_acked()
return count
"""

# A Spark source reads a group through one consumer whose pending entries are its lease
# log. `TAKE_PLAN` (driver, planning a batch) answers where the group stands, without an
# entry: the batch names a count of new entries past an id, and its read task takes them
# itself (XGROUP SETID back to that id, then XREADGROUP, in one MULTI: a retried task
# takes the same entries). Where the consumer still holds entries past the batch's start
# (a run that stopped before its batch was committed), `TAKE_RANGE` moves entries into
# its pending list on the driver and answers only the last id; the executors read that
# range with XPENDING and XRANGE (XRANGE alone where the batch took every entry of the
# range), changing nothing. `ACK_THROUGH` (driver, once a batch is committed) acks every
# entry up to an id, with the settle script's bookkeeping. Payloads never leave Redis on
# the driver's calls.

STREAM_END = """
local info = redis.pcall('XINFO', 'STREAM', KEYS[1])
if info.err then return {'0-0', 0} end  -- no stream yet: nothing was published
local last, added = '0-0', 0
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then last = info[i + 1] end
  if info[i] == 'entries-added' then added = info[i + 1] end
end
return {last, added}
"""

TAKE_PLAN = """
local stream = KEYS[1]
local group, consumer, after = ARGV[1], ARGV[2], ARGV[3]
local info = redis.pcall('XINFO', 'STREAM', stream)
if info.err then return {0, '', -1, 0} end  -- no stream yet: nothing was published
local added = 0
for i = 1, #info, 2 do
  if info[i] == 'entries-added' then added = info[i + 1] end
end
-- Whether the consumer holds an entry past `after` or the group has other consumers,
-- then the group's last delivered id and read counter (-1 where Redis lost it), and the
-- stream's entries-added
local held = #redis.call('XPENDING', stream, group, '(' .. after, '+', 1, consumer)
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', stream, group)) do
  for i = 1, #c, 2 do
    if c[i] == 'name' and c[i + 1] ~= consumer then held = 1 end
  end
end
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local fields = {}
  for i = 1, #g, 2 do fields[g[i]] = g[i + 1] end
  if fields['name'] == group then
    -- Where Redis has no counter but knows the lag (a group that read nothing yet)
    local read, lag = fields['entries-read'], fields['lag']
    if type(read) ~= 'number' then
      if type(lag) == 'number' then read = added - lag else read = -1 end
    end
    return {held, fields['last-delivered-id'], read, added}
  end
end
return {held, '', -1, added}
"""

TAKE_RANGE = """
local stream = KEYS[1]
local group, consumer, after, rows = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
-- `upto`: the last id to take ('' for no bound); `added`: the stream's entries-added
-- when it was the last id (see STREAM_END).
local upto, added = ARGV[5], tonumber(ARGV[6])
local chunk = 1000
-- Entries this consumer already holds past `after` (taken by a run that stopped before
-- its batch was committed) come first, in id order.
local held = redis.call('XPENDING', stream, group, '(' .. after, '+', rows, consumer)
local last, count = after, #held
if count > 0 then last = held[count][1] end
-- The group's last delivered id and read counter (nil: no such group)
local function position()
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local fields = {}
    for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
    if fields['name'] == group then return fields['last-delivered-id'], fields['entries-read'] end
  end
  return nil, nil
end
-- Where the new entries start: when this batch holds nothing else, every entry of the
-- stream from there to its last id is one it takes, in order (this script runs alone),
-- and the executors read them with XRANGE alone.
local start = ''
if count == 0 then start = position() or '' end
-- How many entries up to `upto` the group has not read yet: the entries added up to it
-- less the group's read counter, when Redis knows that counter; else counted in the stream.
local function unread(n)
  local from, read = position()
  if not from then return 0 end
  if type(read) == 'number' then return math.max(0, math.min(n, added - read)) end
  return #redis.call('XRANGE', stream, '(' .. from, upto, 'COUNT', n)
end
local others = {}
while count < rows do
  local n = math.min(rows - count, chunk)
  if upto ~= '' then
    n = unread(n)
    if n == 0 then break end
  end
  local got = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', n, 'STREAMS', stream, '>')
  if not got then break end
  local entries = got[1][2]
  for _, entry in ipairs(entries) do
    local fields, origin = entry[2], nil
    for i = 1, #fields, 2 do
      if fields[i] == 'o' then origin = fields[i + 1] end
    end
    if origin and origin ~= group then
      others[#others + 1] = entry[1]  -- a replay meant for another group
    else
      last, count = entry[1], count + 1
    end
  end
  if #entries < n then break end
end
for i = 1, #others, 1000 do
  redis.call('XACK', stream, group, unpack(others, i, math.min(i + 999, #others)))
end
-- `start` ('' when the executors must look up what this consumer holds in the range)
if #others > 0 or count == 0 then start = '' end
return {last, count, start}
"""

FENCE = """
-- Where a Spark query's last committed batch ended in this partition (the read tasks'
-- fence, see `runtime.spark.redis._source`); nothing where the topic is gone (a
-- destroyed topic keeps no key).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"""

BURY_READ = _SETTLING + """
-- An entry a Spark read task cannot turn into a row, dead-lettered 'error' once: a retried
-- task that sets the group back takes the entry again (pending at attempt 1), and finds
-- the mark the first bury left in `takes`, so it only acks it.
local takes = KEYS[7]
local group, consumer, id, attempt = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local err, dead_limit, mark = ARGV[5], tonumber(ARGV[6]), ARGV[7]
local p = redis.call('XPENDING', stream, group, id, id, 1)[1]
if not p or p[2] ~= consumer then return 'gone' end
redis.call('XACK', stream, group, id)
if redis.call('HSETNX', takes, mark, id .. ' dead') == 0 then return 'again' end
redis.call('HINCRBY', stats, 'nacked', 1)
bury(id, group, '-1', 'error', err, attempt, '', '', dead_limit)
complete(id, nack_record('group:' .. group, 'error', err))
flush_acked()
return 'ok'
"""

ACK_THROUGH = _SETTLING + """
local group, consumer, upto, tmo = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
-- At most `limit` entries a call: a large batch is acked over several calls, and Redis
-- serves other clients between them.
local limit = tonumber(ARGV[5])
local done, late = 0, 0
while done < limit do
  local held = redis.call('XPENDING', stream, group, '-', upto, math.min(1000, limit - done), consumer)
  if #held == 0 then break end
  local ids = {}
  for _, p in ipairs(held) do
    if tmo > 0 and p[3] >= tmo then late = late + 1 end
    ids[#ids + 1] = p[1]
    complete(p[1], nil)
  end
  redis.call('XACK', stream, group, unpack(ids))
  done = done + #ids
  -- one settled record per chunk, as a Python member's batched acks write them
  flush_acked()
  acked = {}
end
return {done, late}
"""

STAGED_COMMIT = """
local stream, groups, readers, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local remaining, dead, committed = KEYS[5], KEYS[6], KEYS[7]
local name, dead_limit = ARGV[1], tonumber(ARGV[2])
local function drop_staged()
  for s = 8, #KEYS do redis.call('DEL', KEYS[s]) end
end
if redis.call('HEXISTS', committed, name) == 1 then
  drop_staged()
  return {'done', 0, 0}
end
for s = 8, #KEYS do
  if redis.call('EXISTS', KEYS[s]) == 0 then return {'missing', s - 7, 0} end
end
local names = redis.call('SMEMBERS', groups)
local ngroups = #names
local nreaders = redis.call('HLEN', readers)
local function add_dead(reason, err, b, f, k, a)
  local fields = {'m', '', 'g', '', 's', '-1', 'r', reason, 'e', err, 'n', '0', 'x', '', 't', '',
                  'b', b, 'f', f, 'k', k, 'a', a}
  if dead_limit > 0 then
    redis.call('XADD', dead, 'MAXLEN', dead_limit, '*', unpack(fields))
  else
    redis.call('XADD', dead, '*', unpack(fields))
  end
end
local published, buried = 0, 0
-- A staged part: its layout ('p': bodies alone; 'm': body, format, key, attributes;
-- 'e': those and an error text, a row for the dead letters), then its values.
for s = 8, #KEYS do
  local part = KEYS[s]
  local layout = redis.call('LINDEX', part, 0)
  local stride = 1
  if layout == 'm' then stride = 4 elseif layout == 'e' then stride = 5 end
  local length = redis.call('LLEN', part)
  local step = stride * 1000
  for first = 1, length - 1, step do
    local values = redis.call('LRANGE', part, first, math.min(first + step, length) - 1)
    for i = 1, #values, stride do
      published = published + 1
      if layout == 'e' then
        add_dead('error', values[i + 4], values[i], values[i + 1], values[i + 2], values[i + 3])
        buried = buried + 1
      elseif ngroups == 0 and nreaders == 0 then
        if layout == 'p' then
          add_dead('no_subscribers', '', values[i], 'm', '', '')
        else
          add_dead('no_subscribers', '', values[i], values[i + 1], values[i + 2], values[i + 3])
        end
        buried = buried + 1
      else
        local id
        if layout == 'p' then
          id = redis.call('XADD', stream, '*', 'b', values[i])
        else
          id = redis.call('XADD', stream, '*', 'b', values[i], 'f', values[i + 1],
                          'k', values[i + 2], 'a', values[i + 3])
        end
        if ngroups + nreaders > 1 then redis.call('HSET', remaining, id, ngroups + nreaders) end
      end
    end
  end
end
local accepted = published - buried
redis.call('HINCRBY', stats, 'published', published)
if buried > 0 then
  redis.call('HINCRBY', stats, 'nacked', buried)
  redis.call('HINCRBY', stats, 'dead_lettered', buried)
end
-- every accepted message waits for its groups and readers (with none, all went to the
-- dead letters above)
if accepted > 0 then redis.call('HINCRBY', stats, 'pending', accepted) end
-- Recorded in the same step as the entries: a commit retried after a lost reply finds
-- it and publishes nothing again.
redis.call('HSET', committed, name, published)
drop_staged()
return {'ok', published, buried}
"""
