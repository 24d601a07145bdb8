end
local out = {}
local j = 0
for i = 5, #ARGV, 3 do
  local t = tonumber(ARGV[i + 2])
  if t < 0 then
    t = server_now
  end
  local r = decide(tonumber(ARGV[i]), ARGV[i + 1] == '1', t)
  for k = 1, 5 do
    out[j + k] = r[k]
  end
  j = j + 5
end
return out
