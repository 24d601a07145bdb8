-- Two-tier mode: lease up to `want` units from a GCRA bucket (the same
-- state as gcra.lua, so both modes can share keys). KEYS[1] key; ARGV: now,
-- emission (µs), burst, want, slack (ms). Grants min(want, units free now)
-- and advances the TAT by exactly that much: leases are taken from the
-- global bucket, never granted on trust. Returns {granted, retry_after of
-- one unit when nothing was granted (µs), now}.
local key = KEYS[1]
local e = tonumber(ARGV[2])
local b = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local slack = tonumber(ARGV[5])
local tau = e * b
local tat = tonumber(redis.call('GET', key)) or now
local base = max(tat, now)
local free = floor((tau - (base - now)) / e)
local granted = min(want, free)
if granted <= 0 then
  return {0, base + e - now - tau, now}
end
local new_tat = base + granted * e
redis.call('SET', key, fmt('%.0f', new_tat), 'PX', max(1, ceil((new_tat - now) / 1000) + slack))
return {granted, 0, now}
