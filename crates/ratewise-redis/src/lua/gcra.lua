-- GCRA: one string per key, the theoretical arrival time (TAT); the
-- decision is gcra_decide.lua's, which precedes this.
local tau = e * b
local allowed, left, wait, retry, new_tat =
  gcra_decide(tonumber(redis.call('GET', key)), now, n, e, tau, peek)
if new_tat then
  redis.call('SET', key, fmt('%.0f', new_tat), 'PX', max(1, ceil(wait / 1000) + slack))
end
return {allowed, left, wait, retry, now}
