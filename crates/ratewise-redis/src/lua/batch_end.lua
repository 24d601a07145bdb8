end
local pack = struct.pack
local out = {}
for i = 5, #ARGV, 3 do
  local t = tonumber(ARGV[i + 2])
  if t < 0 then
    t = server_now
  end
  local r = decide(tonumber(ARGV[i]), ARGV[i + 1] == '1', t)
  out[#out + 1] = pack('<ddddd', r[1], r[2], r[3], r[4], r[5])
end
return table.concat(out)
