-- Concurrent duplicates: every operation ID is sent four times in a row (PREFIX-1 four times,
-- then PREFIX-2, ...), and wrk's connections take turns, so the four copies race on different
-- connections (`wrk ... -s bench/dup.lua URL -- PREFIX`).
local prefix, n = "d", 0
init = function(args) prefix = args[1] or prefix end
request = function()
  n = n + 1
  return wrk.format("POST", "/bench/v1/refunds",
    {["x-operation-id"] = prefix .. "-" .. math.floor(n / 4), ["content-type"] = "application/json"},
    '{"amount":100,"currency":"usd"}')
end
