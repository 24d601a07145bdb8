-- GCRA batch: the protocol of batch.lua (same KEYS, ARGV and answer), with
-- each key read once and written once. A key's TAT is carried from request
-- to request in a table; its last admission's SET (value and PX) is its only
-- write, which is what its own SET would have left after one-by-one calls.
-- A key Redis refuses (GET fails, e.g. WRONGTYPE) answers allowed = -1 for
-- each of its requests; the other keys' stand. The decision is
-- gcra_decide.lua's, which precedes this.
local e = tonumber(ARGV[2])
local b = tonumber(ARGV[3])
local slack = tonumber(ARGV[4])
local tau = e * b
local stored = {}
local read = {}
local last_ahead = {}
local pack, unpack = struct.pack, struct.unpack
local out = {}
local reqs = ARGV[5]
for at = 1, #reqs, 32 do
  local n, peek_flag, t, k = unpack('<dddd', reqs, at)
  local peek = peek_flag == 1
  if t < 0 then
    t = now
  end
  if read[k] == nil then
    local ok, v = pcall(redis.call, 'GET', KEYS[k])
    read[k] = ok
    if ok then
      stored[k] = tonumber(v)
    end
  end
  if not read[k] then
    out[#out + 1] = pack('<ddddd', -1, 0, 0, 0, t)
  else
    local allowed, left, wait, retry, new_tat = gcra_decide(stored[k], t, n, e, tau, peek)
    if new_tat then
      stored[k] = new_tat
      last_ahead[k] = wait
    end
    out[#out + 1] = pack('<ddddd', allowed, left, wait, retry, t)
  end
end
for k, ahead in pairs(last_ahead) do
  redis.call('SET', KEYS[k], fmt('%.0f', stored[k]), 'PX', max(1, ceil(ahead / 1000) + slack))
end
return table.concat(out)
