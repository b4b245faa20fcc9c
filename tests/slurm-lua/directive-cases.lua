-- Checks burst_buffer.lua's reading of directive lines against the table the C++ reader is
-- tested on (tests/data/directive-reading-cases.tsv): the joined text of every directive.
-- Run by ctest:  lua5.x directive-cases.lua SOURCE_DIR
local source = arg[1] or "."
slurm = { SUCCESS = 0, ERROR = -1 }
dofile(source .. "/share/bbkit/slurm/burst_buffer.lua")

local failures, cases = 0, 0
for row in io.lines(source .. "/tests/data/directive-reading-cases.tsv") do
    if row ~= "" and string.sub(row, 1, 1) ~= "#" then
        local name, script, expected = string.match(row, "^([^\t]+)\t([^\t]+)\t([^\t]+)$")
        if not name then
            io.stderr:write("malformed line: " .. row .. "\n")
            os.exit(1)
        end
        script = string.gsub(script, "|", "\n")
        local got = {}
        for _, line in ipairs(bbkit.directive_lines(script, "BB_LUA")) do
            got[#got + 1] = "[" .. line.text .. "]"
        end
        got = table.concat(got)
        cases = cases + 1
        if got ~= expected then
            failures = failures + 1
            io.stderr:write(string.format("%s: expected %s, got %s\n", name, expected, got))
        end
    end
end
print(string.format("%d directive-reading cases, %d failures", cases, failures))
if failures > 0 or cases < 10 then
    os.exit(1)
end
