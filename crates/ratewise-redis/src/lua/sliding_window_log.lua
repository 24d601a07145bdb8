-- Sliding-window log: a sorted set with one member per admitted unit
-- (score = admission time in µs, member "at:seq"). Exact: at most `burst`
-- units in every window (t - W, t]; at most `burst` members per key. Every
-- step is a logarithmic sorted-set operation (a weight of n adds n
-- members), so the cost does not grow with the burst.
local W = e * b
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local floor_ = -1
if newest[2] then
  floor_ = tonumber(newest[2])
end
local t0 = max(now, floor_)
local edge = fmt('%.0f', t0 - W)
local total = redis.call('ZCOUNT', key, '(' .. edge, '+inf')
local at = t0
if total + n > b then
  -- The (total + n - b)-th oldest unit in the window must leave first.
  local m = redis.call('ZRANGEBYSCORE', key, '(' .. edge, '+inf', 'WITHSCORES', 'LIMIT', total + n - b - 1, 1)
  at = tonumber(m[2]) + W
end
local allowed = at <= now
local commit = allowed and not peek
if commit then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', edge)
  local stamp = fmt('%.0f', now)
  local seq = 0
  if floor_ == now then
    seq = redis.call('ZCOUNT', key, stamp, stamp)
  end
  local batch = {}
  for i = 1, n do
    batch[#batch + 1] = stamp
    batch[#batch + 1] = stamp .. ':' .. (seq + i)
    if #batch >= 1000 or i == n then
      redis.call('ZADD', key, unpack(batch))
      batch = {}
    end
  end
  total = total + n
  floor_ = now
end
-- Empty (as a fresh key) once the newest unit has left the window.
local reset_at = now
if floor_ >= 0 and floor_ + W > t0 then
  reset_at = floor_ + W
end
local remaining = 0
if now >= floor_ then
  remaining = max(0, b - total)
end
