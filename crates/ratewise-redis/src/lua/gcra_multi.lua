-- Several GCRA limits in one decision: check every level, then commit all
-- or none. KEYS[i] is level i's key; ARGV: now, peek, slack_ms, n, then
-- (emission, burst) per level. Returns 4 integers per level, as gcra.lua, then `now`.
local peek = ARGV[2] == '1'
local slack = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local levels = #KEYS
local out = {}
local new_tats = {}
local aheads = {}
local denied = false
for i = 1, levels do
  local e = tonumber(ARGV[3 + 2 * i])
  local b = tonumber(ARGV[4 + 2 * i])
  local tau = e * b
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  local base = max(tat, now)
  local new_tat = base + n * e
  local ahead = new_tat - now
  local a = base - now
  local retry = -1
  if ahead > tau then
    retry = ahead - tau
    denied = true
  end
  out[4 * i - 3] = (retry < 0 and 1 or 0)
  out[4 * i - 2] = floor((max(0, tau - a)) / e)
  out[4 * i - 1] = a
  out[4 * i] = retry
  new_tats[i] = new_tat
  aheads[i] = {ahead, tau, e}
end
out[4 * levels + 1] = now
if denied or peek then
  return out
end
for i = 1, levels do
  local ahead = aheads[i][1]
  redis.call('SET', KEYS[i], fmt('%.0f', new_tats[i]), 'PX', max(1, ceil(ahead / 1000) + slack))
  out[4 * i - 2] = floor((aheads[i][2] - ahead) / aheads[i][3])
  out[4 * i - 1] = ahead
end
return out
