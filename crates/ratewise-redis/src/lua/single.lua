-- Single-key scripts: KEYS[1] is the key; ARGV: now, emission interval
-- (µs), burst, n, peek ('1' = write nothing), expiry slack (ms).
-- They answer {allowed, remaining, reset_after, retry_after or -1, now}.
local key = KEYS[1]
local e = tonumber(ARGV[2])
local b = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local peek = ARGV[5] == '1'
local slack = tonumber(ARGV[6])
