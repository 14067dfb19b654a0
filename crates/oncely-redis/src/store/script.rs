//! The server-side steps: the commit script (claims checked, reads re-checked, writes applied,
//! all or nothing) and the dead-letter script; and the Redis Cluster slot of a key.

use redis::Script;
use std::sync::LazyLock;

/// The commit step. `KEYS`: the claim keys, then the guarded keys, then the written keys.
/// `ARGV`: retention seconds, claim count, guard count, write count; then each claim's hash;
/// then per guard `kind` (`g` GET, `h` HGET), field, whether the read found a value (`1`/`0`)
/// and the value read; then per write the command, its argument count and its arguments
/// (the key is its `KEYS` entry). Returns `{"ok"}`, or `{"held", key, hash}` when a claim
/// was taken since it was read, or `{"stale", key}` when a guarded read changed, or
/// `{"type", key, why}` when a write would fail: in the last three cases nothing is written.
pub(crate) static COMMIT: LazyLock<Script> = LazyLock::new(|| Script::new(COMMIT_LUA));

const COMMIT_LUA: &str = r#"
local ttl = tonumber(ARGV[1])
local nc, ng, nw = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local a, k = 5, 1
for i = 1, nc do
  local held = redis.call('GET', KEYS[k])
  if held then return {'held', KEYS[k], held} end
  k = k + 1
end
a = a + nc
for i = 1, ng do
  local kind, field, found, want = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local t = redis.call('TYPE', KEYS[k]).ok
  local now = false
  if kind == 'g' then
    if t ~= 'none' and t ~= 'string' then return {'stale', KEYS[k]} end
    now = redis.call('GET', KEYS[k])
  else
    if t ~= 'none' and t ~= 'hash' then return {'stale', KEYS[k]} end
    now = redis.call('HGET', KEYS[k], field)
  end
  if found == '1' then
    if now ~= want then return {'stale', KEYS[k]} end
  elseif now then
    return {'stale', KEYS[k]}
  end
  k = k + 1
  a = a + 4
end
-- Every write is checked before the first one runs: a Lua script is atomic but has no
-- rollback, so a command failing half-way would leave the writes before it applied.
local needs = {SET='any', DEL='any', EXPIRE='any', PEXPIRE='any',
  INCRBY='int', DECRBY='int', INCRBYFLOAT='string', APPEND='string',
  HSET='hash', HDEL='hash', HINCRBY='hash', HINCRBYFLOAT='hash',
  SADD='set', SREM='set', RPUSH='list', LPUSH='list',
  ZADD='zset', ZREM='zset', ZINCRBY='zset'}
local first_write, kw, aw = a, k, a
for i = 1, nw do
  local cmd, n = ARGV[aw], tonumber(ARGV[aw + 1])
  local need = needs[cmd]
  if not need then return {'type', KEYS[kw], 'command ' .. cmd .. ' is not allowed'} end
  local t = redis.call('TYPE', KEYS[kw]).ok
  if need == 'int' then
    if t ~= 'none' and t ~= 'string' then return {'type', KEYS[kw], 'holds a ' .. t} end
    local v = redis.call('GET', KEYS[kw])
    if v and not string.match(v, '^-?%d+$') then return {'type', KEYS[kw], 'is not an integer'} end
  elseif need ~= 'any' and t ~= 'none' and t ~= need then
    return {'type', KEYS[kw], 'holds a ' .. t .. ', ' .. cmd .. ' needs a ' .. need}
  end
  kw = kw + 1
  aw = aw + 2 + n
end
for i = 1, nc do
  redis.call('SET', KEYS[i], ARGV[4 + i], 'EX', ttl)
end
a = first_write
for i = 1, nw do
  local cmd, n = ARGV[a], tonumber(ARGV[a + 1])
  local args = {KEYS[k]}
  for j = 1, n do args[j + 1] = ARGV[a + 1 + j] end
  redis.call(cmd, unpack(args))
  k = k + 1
  a = a + 2 + n
end
return {'ok'}
"#;

/// The dead-letter step: one row per `(consumer, raw id, payload hash, reason)`.
/// `KEYS`: the index hash, the id counter, the ordered set of rows, the row key prefix.
/// `ARGV`: the dedup key, attempts, detail, then the row's other fields as name/value pairs.
/// Returns the row id.
pub(crate) static DEAD_LETTER: LazyLock<Script> = LazyLock::new(|| Script::new(DEAD_LETTER_LUA));

const DEAD_LETTER_LUA: &str = r#"
local t = redis.call('TIME')
local now = tostring(t[1] * 1000 + math.floor(t[2] / 1000))
local id = redis.call('HGET', KEYS[1], ARGV[1])
if id then
  local row = KEYS[4] .. id
  local attempts = tonumber(redis.call('HGET', row, 'attempts') or '0')
  local mine = tonumber(ARGV[2])
  if mine > attempts then attempts = mine end
  redis.call('HSET', row, 'attempts', tostring(attempts), 'detail', ARGV[3], 'last_seen', now)
  redis.call('HINCRBY', row, 'deliveries', 1)
  return tonumber(id)
end
id = redis.call('INCR', KEYS[2])
local row = KEYS[4] .. id
local fields = {'attempts', ARGV[2], 'detail', ARGV[3], 'dead_lettered_at', now, 'last_seen', now,
  'deliveries', '1', 'dedup', ARGV[1]}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', row, unpack(fields))
redis.call('HSET', KEYS[1], ARGV[1], id)
redis.call('ZADD', KEYS[3], id, id)
return id
"#;

/// The Redis Cluster hash slot of `key`: CRC16 of its hash tag (the text between the first
/// `{` and the next `}`, when not empty) or of the whole key, modulo 16384.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

/// CRC16-CCITT (XMODEM), as Redis Cluster uses.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from CLUSTER KEYSLOT.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"{oncely}:inbox:x"), slot(b"oncely"));
    }
}
