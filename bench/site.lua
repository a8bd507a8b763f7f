-- wrk script: every connection walks the demo site as a browser would, a page
-- then its embedded objects, over keep-alive. The list of paths comes from the
-- file named by the environment variable SITE_PATHS (one path a line), made by
-- bench/age_vs_rr.sh from the backend's /page/N.objects lists.
local paths = {}
local counter = 0

function init(args)
  local f = assert(io.open(os.getenv("SITE_PATHS"), "r"))
  for line in f:lines() do
    if #line > 0 then paths[#paths + 1] = line end
  end
  f:close()
  -- Threads start at different places in the walk.
  counter = math.random(#paths) - 1
end

function request()
  counter = counter % #paths + 1
  return wrk.format("GET", paths[counter], { ["Host"] = "site" })
end
