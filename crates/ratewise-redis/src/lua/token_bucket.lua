-- Token bucket: a hash {k = credit in µs of capacity, t = time of k}.
-- Same arguments and answer as gcra.lua; decides exactly as GCRA does.
local tau = e * b
local st = redis.call('HMGET', key, 'k', 't')
local credit = tau
local last = now
if st[1] and st[2] then
  credit = tonumber(st[1])
  last = tonumber(st[2])
end
-- An earlier `now` than the last write counts as no time passing.
local t = max(now, last)
credit = min(tau, credit + (t - last))
local need = n * e
if credit < need then
  return {0, floor(credit / e), tau - credit, need - credit, now}
end
if peek then
  return {1, floor(credit / e), tau - credit, -1, now}
end
local after = credit - need
redis.call('HSET', key, 'k', fmt('%.0f', after), 't', fmt('%.0f', t))
redis.call('PEXPIRE', key, max(1, ceil((tau - after) / 1000) + slack))
return {1, floor(after / e), tau - after, -1, now}
