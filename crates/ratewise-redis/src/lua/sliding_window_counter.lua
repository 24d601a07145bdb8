-- Sliding-window counter: a hash {w = window index, p = previous window's
-- count, c = current count}; the estimate p x (W - elapsed) / W + c is kept
-- multiplied by W, so it stays an exact integer (burst x W <= 2^52).
local W = e * b
local st = redis.call('HMGET', key, 'w', 'p', 'c')
local idx = floor(now / W)
local p = 0
local c = 0
if st[1] and st[2] and st[3] then
  idx = tonumber(st[1])
  p = tonumber(st[2])
  c = tonumber(st[3])
end
local function counts(k)
  if k == idx then
    return p, c
  elseif k == idx + 1 then
    return c, 0
  end
  return 0, 0
end
-- The earliest time the request passes (see the core's
-- sliding_window_counter: p x (W - e) <= room x W).
local t0 = max(now, idx * W)
local k0 = floor(t0 / W)
local at = (k0 + 2) * W
for k = k0, k0 + 2 do
  local pk, ck = counts(k)
  if ck + n <= b then
    local room = b - ck - n
    local need = 0
    if pk > 0 then
      need = W - min(W, floor((room * W) / pk))
    end
    local from = 0
    if k == k0 then
      from = t0 - k0 * W
    end
    local off = max(need, from)
    if off < W then
      at = k * W + off
      break
    end
  end
end
local allowed = at <= now
local commit = allowed and not peek
if commit then
  local kn = floor(now / W)
  if kn == idx + 1 then
    p = c
    c = 0
  elseif kn > idx then
    p = 0
    c = 0
  end
  idx = max(idx, kn)
  c = c + n
  redis.call('HSET', key, 'w', fmt('%.0f', idx), 'p', fmt('%.0f', p), 'c', fmt('%.0f', c))
end
local t = max(now, idx * W)
local k = floor(t / W)
local pk, ck = counts(k)
local remaining = 0
if now >= idx * W then
  local weighted = pk * (W - (t - k * W)) + ck * W
  remaining = floor((max(0, b * W - weighted)) / W)
end
local reset_at = now
if ck > 0 then
  reset_at = (k + 2) * W
elseif pk > 0 then
  reset_at = (k + 1) * W
end
