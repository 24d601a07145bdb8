-- GCRA: one string per key, the theoretical arrival time (TAT).
local tau = e * b
local tat = tonumber(redis.call('GET', key)) or now
local base = max(tat, now)
local new_tat = base + n * e
local ahead = new_tat - now
if ahead > tau or peek then
  local a = base - now
  local retry = -1
  if ahead > tau then
    retry = ahead - tau
  end
  return {(retry < 0 and 1 or 0), floor((max(0, tau - a)) / e), a, retry, now}
end
redis.call('SET', key, fmt('%.0f', new_tat), 'PX', max(1, ceil(ahead / 1000) + slack))
return {1, floor((tau - ahead) / e), ahead, -1, now}
