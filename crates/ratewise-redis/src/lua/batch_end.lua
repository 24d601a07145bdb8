end
local pack = struct.pack
local out = {}
for i = 5, #ARGV, 4 do
  local t = tonumber(ARGV[i + 2])
  if t < 0 then
    t = server_now
  end
  key = KEYS[tonumber(ARGV[i + 3])]
  local ok, r = pcall(decide, tonumber(ARGV[i]), ARGV[i + 1] == '1', t)
  if ok then
    out[#out + 1] = pack('<ddddd', r[1], r[2], r[3], r[4], r[5])
  else
    out[#out + 1] = pack('<ddddd', -1, 0, 0, 0, t)
  end
end
return table.concat(out)
