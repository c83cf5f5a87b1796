-- wrk script: POST one record per request, spread over STREAMS streams named
-- <PREFIX>bench-<i> (created beforehand by bench/http.sh).
local streams = tonumber(os.getenv("STREAMS") or "64")
local body = string.rep("x", tonumber(os.getenv("RECORD_BYTES") or "100"))
local prefix = os.getenv("PREFIX") or "/v1/stream/"
local key = os.getenv("STREAM_KEY")
local headers = { ["Content-Type"] = "application/octet-stream" }
if key and key ~= "" then
  headers["Stream-Encryption-Key"] = key
end
local n = 0

function setup(thread)
  thread:set("offset", math.random(0, streams - 1))
end

function request()
  n = n + 1
  local path = prefix .. "bench-" .. ((n + (offset or 0)) % streams)
  return wrk.format("POST", path, headers, body)
end
