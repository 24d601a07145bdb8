-- ratewise-redis: shared prelude. Times and intervals are integer
-- microseconds held in Lua doubles; the Rust side keeps every time and
-- window at or below 2^52, so every sum, product and quotient here stays
-- below 2^53 and is exact: for integers 0 <= x and d >= 1 with x + d <=
-- 2^53, floor(x / d) and ceil(x / d) computed in doubles are the exact
-- integer quotients (a remainder r >= 1 moves x / d by r / d, more than
-- the rounding error x / d * 2^-53). Numbers go back to Redis as integers
-- (never fractions Redis would truncate) and are written with %.0f (Lua's
-- tostring would print 1.7e+15). Helpers are plain locals (no closures are
-- created per call; this prelude runs on every EVALSHA).
-- ARGV[1] is `now` in microseconds, or -1 for the server clock (TIME).
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local fmt = string.format
local now = tonumber(ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
