-- wrk script: POST one record per request, spread over STREAMS streams named
-- <PREFIX>bench-<i> (created beforehand by bench/http.sh). With PREFIX
-- /v1/streams/ (the product API) it posts to bench-<i>/records under
-- Prisma-Routing-Key k<j>, j cycling over ROUTING_KEYS keys. JSON_RECORDS=1 sends
-- JSON string records instead of opaque bytes.
local streams = tonumber(os.getenv("STREAMS") or "64")
local routing_keys = tonumber(os.getenv("ROUTING_KEYS") or "1000")
local record_bytes = tonumber(os.getenv("RECORD_BYTES") or "100")
local body = string.rep("x", record_bytes)
local prefix = os.getenv("PREFIX") or "/v1/stream/"
local key = os.getenv("STREAM_KEY")
local product = prefix == "/v1/streams/"
local headers = { ["Content-Type"] = "application/octet-stream" }
-- JSON_RECORDS=1: each record is a JSON string of RECORD_BYTES bytes.
if os.getenv("JSON_RECORDS") == "1" then
  body = '"' .. string.rep("x", math.max(record_bytes - 2, 0)) .. '"'
  headers["Content-Type"] = "application/json"
end
if key and key ~= "" then
  if product then
    headers["Prisma-Encryption-Key"] = key
  else
    headers["Stream-Encryption-Key"] = key
  end
end
-- BEARER_TOKEN: sent as Authorization (wrk's -H headers are not, as this
-- script passes its own header table).
local bearer = os.getenv("BEARER_TOKEN")
if bearer and bearer ~= "" then
  headers["Authorization"] = "Bearer " .. bearer
end
-- BATCH_RECORDS=N (with the product API prefix): each request posts one JSON
-- array of N string records of RECORD_BYTES bytes to bench-<i>/records:batch.
local batch_records = tonumber(os.getenv("BATCH_RECORDS") or "0")
if product and batch_records > 0 then
  local record = '"' .. string.rep("x", math.max(record_bytes - 2, 0)) .. '"'
  local parts = {}
  for i = 1, batch_records do parts[i] = record end
  body = "[" .. table.concat(parts, ",") .. "]"
  headers["Content-Type"] = "application/json"
end
local n = 0

function setup(thread)
  thread:set("offset", math.random(0, streams - 1))
end

function request()
  n = n + 1
  local path = prefix .. "bench-" .. ((n + (offset or 0)) % streams)
  if product then
    headers["Prisma-Routing-Key"] = "k" .. (n % routing_keys)
    if batch_records > 0 then
      path = path .. "/records:batch"
    else
      path = path .. "/records"
    end
  end
  return wrk.format("POST", path, headers, body)
end
