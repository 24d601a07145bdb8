end
local pack, unpack = struct.pack, struct.unpack
local out = {}
local reqs = ARGV[5]
for at = 1, #reqs, 32 do
  local n, peek, t, k = unpack('<dddd', reqs, at)
  if t < 0 then
    t = server_now
  end
  key = KEYS[k]
  local ok, r = pcall(decide, n, peek == 1, t)
  if ok then
    out[#out + 1] = pack('<ddddd', r[1], r[2], r[3], r[4], r[5])
  else
    out[#out + 1] = pack('<ddddd', -1, 0, 0, 0, t)
  end
end
return table.concat(out)
