-- ratewise-redis: shared helpers. Times and intervals are integer
-- microseconds held in Lua doubles; the Rust side keeps every value below
-- 2^52, so all arithmetic here is exact. Numbers go back to Redis as
-- integers (never fractions Redis would truncate) and are written with
-- %.0f (Lua's tostring would print 1.7e+15).
-- ARGV[1] is `now` in microseconds, or -1 for the server clock (TIME).
local function now_us(arg)
  local t = tonumber(arg)
  if t >= 0 then
    return t
  end
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end
-- floor(x / d), exact for integers 0 <= x < 2^53, d >= 1.
local function idiv(x, d)
  local q = math.floor(x / d)
  if q * d > x then
    q = q - 1
  elseif (q + 1) * d <= x then
    q = q + 1
  end
  return q
end
-- ceil(x / d).
local function cdiv(x, d)
  local q = idiv(x, d)
  if q * d < x then
    q = q + 1
  end
  return q
end
local function str(x)
  return string.format('%.0f', x)
end
-- Expire `key` `us` microseconds from now (rounded up to whole ms) plus
-- the caller's slack: exactly when its state is back to a fresh key's.
local function expire_in(key, us, slack)
  redis.call('PEXPIRE', key, math.max(1, cdiv(us, 1000) + slack))
end
local function flag(b)
  if b then
    return 1
  end
  return 0
end
