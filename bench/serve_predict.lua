-- wrk script for bench/serve_load.py: every request POSTs one 28x28 image (a fixed pattern of
-- pixel values 0-255) to /v1/predict.
local pixels = {}
for i = 0, 783 do pixels[#pixels + 1] = tostring((i * 37) % 256) end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs": [[' .. table.concat(pixels, ",") .. ']], "top_k": 3}'

-- Any answer but 200 is counted, so that a run full of errors cannot pass for a fast one.
local failed = 0
function response(status, headers, body)
  if status ~= 200 then failed = failed + 1 end
end
function done(summary, latency, requests)
  io.write(string.format("non-200: %d\n", summary.errors.status))
end
