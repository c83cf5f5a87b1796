-- wrk script: read one routing key of collection <COLLECTION> from the
-- beginning, cycling over ROUTING_KEYS keys (k0, k1, ...), one page of at most
-- MAX_BYTES per request.
local keys = tonumber(os.getenv("ROUTING_KEYS") or "1000")
local collection = os.getenv("COLLECTION") or "keyread"
local max_bytes = os.getenv("MAX_BYTES") or "1048576"
local headers = { ["Prisma-Encryption-Key"] = os.getenv("STREAM_KEY") }
local n = 0

function request()
  n = n + 1
  local path = "/v1/streams/" .. collection .. "/records?routingKey=k" .. (n % keys)
    .. "&maxBytes=" .. max_bytes
  return wrk.format("GET", path, headers)
end
