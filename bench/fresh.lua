-- A new operation ID per request: PREFIX-1, PREFIX-2, ... (`wrk ... -s bench/fresh.lua URL -- PREFIX`;
-- give each run its own prefix, or its IDs are replays of the run before).
local prefix, n = "x", 0
init = function(args) prefix = args[1] or prefix end
request = function()
  n = n + 1
  return wrk.format("POST", "/bench/v1/refunds",
    {["x-operation-id"] = prefix .. "-" .. n, ["content-type"] = "application/json"},
    '{"amount":100,"currency":"usd"}')
end
