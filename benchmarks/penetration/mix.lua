-- wrk script: GET /products/<id> for a mix of ids that exist (1..rows) and random ids that
-- do not (rows+1 .. rows+10^9, the attack of published cache-penetration write-ups: random
-- ids that bypass the cache).
-- wrk ... -s mix.lua URL -- ROWS EXIST_RATIO SEED
-- Prints one line "WRKJSON {...}" with counts, statuses and latency percentiles (us).

local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  rows = tonumber(args[1]) or 100000
  ratio = tonumber(args[2]) or 0.2
  math.randomseed((tonumber(args[3]) or 1) * 7919 + tid)
  s200, s404, sother = 0, 0, 0
end

function request()
  local id
  if math.random() < ratio then
    id = math.random(1, rows)
  else
    id = rows + math.random(1, 1000000000)
  end
  return wrk.format("GET", "/products/" .. id)
end

function response(status, headers, body)
  if status == 200 then
    s200 = s200 + 1
  elseif status == 404 then
    s404 = s404 + 1
  else
    sother = sother + 1
  end
end

function done(summary, latency, requests)
  local a, b, c = 0, 0, 0
  for _, t in ipairs(threads) do
    a = a + t:get("s200"); b = b + t:get("s404"); c = c + t:get("sother")
  end
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "duration_us": %d, "connect_errors": %d, "read_errors": %d, ' ..
    '"write_errors": %d, "status_errors": %d, "timeouts": %d, "mean_us": %.1f, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, "s200": %d, "s404": %d, ' ..
    '"sother": %d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, a, b, c))
end
