-- Fixed window: a hash {w = window index, c = units counted in it};
-- windows of W = emission x burst, aligned to time zero.
local W = e * b
local st = redis.call('HMGET', key, 'w', 'c')
local idx = floor(now / W)
local cnt = 0
if st[1] and st[2] then
  idx = tonumber(st[1])
  cnt = tonumber(st[2])
end
local t = max(now, idx * W)
local k = floor(t / W)
local used = 0
if k == idx then
  used = cnt
end
local at = t
if used + n > b then
  at = (k + 1) * W
end
local allowed = at <= now
local commit = allowed and not peek
if commit then
  local kn = floor(now / W)
  if kn ~= idx then
    idx = kn
    cnt = 0
  end
  cnt = cnt + n
  redis.call('HSET', key, 'w', fmt('%.0f', idx), 'c', fmt('%.0f', cnt))
end
local t2 = max(now, idx * W)
local k2 = floor(t2 / W)
local reset_at = (k2 + 1) * W
local remaining = 0
if now >= idx * W then
  local u = 0
  if k2 == idx then
    u = cnt
  end
  remaining = max(0, b - u)
end
