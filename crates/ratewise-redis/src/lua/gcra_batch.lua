-- GCRA batch: the protocol of batch.lua (same ARGV, same answer), with
-- the key read once and written once. The TAT is carried from request to
-- request in a local; the last admission's SET (value and PX) is the only
-- write, which is what its own SET would have left after one-by-one calls.
local key = KEYS[1]
local e = tonumber(ARGV[2])
local b = tonumber(ARGV[3])
local slack = tonumber(ARGV[4])
local tau = e * b
local stored = tonumber(redis.call('GET', key))
local last_ahead = nil
local pack = struct.pack
local out = {}
for i = 5, #ARGV, 3 do
  local n = tonumber(ARGV[i])
  local peek = ARGV[i + 1] == '1'
  local t = tonumber(ARGV[i + 2])
  if t < 0 then
    t = now
  end
  local base = max(stored or t, t)
  local new_tat = base + n * e
  local ahead = new_tat - t
  if ahead > tau or peek then
    local a = base - t
    local retry = -1
    if ahead > tau then
      retry = ahead - tau
    end
    out[#out + 1] = pack('<ddddd', (retry < 0 and 1 or 0), floor((max(0, tau - a)) / e), a, retry, t)
  else
    stored = new_tat
    last_ahead = ahead
    out[#out + 1] = pack('<ddddd', 1, floor((tau - ahead) / e), ahead, -1, t)
  end
end
if last_ahead then
  redis.call('SET', key, fmt('%.0f', stored), 'PX', max(1, ceil(last_ahead / 1000) + slack))
end
return table.concat(out)
