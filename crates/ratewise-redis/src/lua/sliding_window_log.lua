-- Sliding-window log: a sorted set, one member "at:weight" per admission
-- time (score = at); admissions at the same microsecond merge. Exact: at
-- most `burst` units in every window (t - W, t]. Memory: up to `burst`
-- members per key.
local W = e * b
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local floor_ = -1
if newest[2] then
  floor_ = tonumber(newest[2])
end
local t0 = max(now, floor_)
local members = redis.call('ZRANGEBYSCORE', key, '(' .. fmt('%.0f', t0 - W), '+inf')
local ats = {}
local ws = {}
local total = 0
for i, m in ipairs(members) do
  local a, w = string.match(m, '^(%d+):(%d+)$')
  ats[i] = tonumber(a)
  ws[i] = tonumber(w)
  total = total + ws[i]
end
local at = t0
if total + n > b then
  local left = total
  for i = 1, #ws do
    left = left - ws[i]
    if left + n <= b then
      at = ats[i] + W
      break
    end
  end
end
local allowed = at <= now
local commit = allowed and not peek
if commit then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%.0f', t0 - W))
  local last = #ats
  if last > 0 and ats[last] == now then
    redis.call('ZREM', key, members[last])
    ws[last] = ws[last] + n
  else
    last = last + 1
    ats[last] = now
    ws[last] = n
  end
  redis.call('ZADD', key, fmt('%.0f', now), fmt('%.0f', now) .. ':' .. fmt('%.0f', ws[last]))
  total = total + n
  floor_ = max(floor_, now)
end
local reset_at = now
if #ats > 0 then
  reset_at = ats[#ats] + W
end
local remaining = 0
if now >= floor_ then
  remaining = max(0, b - total)
end
