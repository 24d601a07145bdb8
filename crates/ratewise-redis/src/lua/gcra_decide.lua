-- GCRA's decision for `n` units at `t` against a stored TAT (`stored`, nil
-- for none), with emission interval `e` and tolerance `tau`: allowed (1 or
-- 0), remaining, the wait it reports, retry (-1 for none), and the new TAT
-- to store when it admits (nil when it stores nothing: a refusal or a peek).
local function gcra_decide(stored, t, n, e, tau, peek)
  local base = max(stored or t, t)
  local new_tat = base + n * e
  local ahead = new_tat - t
  if ahead > tau or peek then
    local a = base - t
    local retry = -1
    if ahead > tau then
      retry = ahead - tau
    end
    return (retry < 0 and 1 or 0), floor((max(0, tau - a)) / e), a, retry, nil
  end
  return 1, floor((tau - ahead) / e), ahead, -1, new_tat
end
