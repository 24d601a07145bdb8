-- The window scripts' common end. They set `allowed`, `commit` (allowed and
-- not a peek), `at` (the earliest time the request passes), `remaining` and
-- `reset_at` (when everything counted stops counting, after this decision).
-- A written key expires exactly at `reset_at`.
if commit then
  redis.call('PEXPIRE', key, max(1, ceil((reset_at - now) / 1000) + slack))
end
local retry = -1
if not allowed then
  retry = at - now
end
return {(allowed and 1 or 0), remaining, reset_at - now, retry, now}
