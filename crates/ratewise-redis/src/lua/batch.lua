-- Batched scripts: several requests under one quota, for one key or
-- several, decided one after another in ARGV order, each exactly as the
-- single script would decide it alone (every step reads its key's state as
-- the previous step left it). KEYS are the batch's distinct keys; ARGV: the
-- server clock's `now` (-1 = read TIME once, 0 = unused), emission interval
-- (µs), burst, expiry slack (ms), then the requests packed in one string:
-- per request four little-endian doubles (exact: integers below 2^53), n,
-- peek (1 = write nothing), its own now (µs; -1 = the server's time) and the
-- index of its key in KEYS, so Redis parses one argument per batch, not
-- four per request. Answers one string: per request, in order, the single
-- script's 5 integers {allowed, remaining, reset_after, retry_after or -1,
-- now} as little-endian doubles (exact: every value is an integer below
-- 2^53), 40 bytes per request, so the client decodes a batch without
-- parsing a reply array. A request whose key Redis refuses (e.g.
-- WRONGTYPE) answers allowed = -1 and fails alone: the others stand.
local key
local e = tonumber(ARGV[2])
local b = tonumber(ARGV[3])
local slack = tonumber(ARGV[4])
local server_now = now
local function decide(n, peek, now)
