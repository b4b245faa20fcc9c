-- Checks cli_filter.lua's reading of DataWarp scripts (#DW and #BB lines, as Slurm's
-- burst_buffer/datawarp plugin collects them) against the table the C++ reader is tested on
-- (tests/data/datawarp-directive-cases.tsv). Run by ctest:  lua5.x datawarp-cases.lua SOURCE_DIR
local source = arg[1] or "."
slurm = { SUCCESS = 0, ERROR = -1 }
dofile(source .. "/share/bbkit/slurm/cli_filter.lua")

local failures, cases = 0, 0
for row in io.lines(source .. "/tests/data/datawarp-directive-cases.tsv") do
    if row ~= "" and string.sub(row, 1, 1) ~= "#" then
        local name, script, expected = string.match(row, "^([^\t]+)\t([^\t]+)\t([^\t]+)\t[^\t]+$")
        if not name then
            io.stderr:write("malformed line: " .. row .. "\n")
            os.exit(1)
        end
        script = string.gsub(script, "|", "\n")
        local lines = bbkit_datawarp_lines(script)
        local got = "refused"
        if lines then
            local parts = {}
            for _, line in ipairs(lines) do
                parts[#parts + 1] = "[" .. line .. "]"
            end
            got = table.concat(parts)
        end
        cases = cases + 1
        if got ~= expected then
            failures = failures + 1
            io.stderr:write(string.format("%s: expected %s, got %s\n", name, expected, got))
        end
    end
end
print(string.format("%d datawarp directive cases, %d failures", cases, failures))
if failures > 0 or cases < 20 then
    os.exit(1)
end
