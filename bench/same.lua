-- One operation again and again: after the first request, every one is a replay.
request = function()
  return wrk.format("POST", "/bench/v1/refunds",
    {["x-operation-id"] = "replayed-op", ["content-type"] = "application/json"},
    '{"amount":100,"currency":"usd"}')
end
