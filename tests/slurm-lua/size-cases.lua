-- Checks burst_buffer.lua's size parser against the table the C++ parser is tested on
-- (tests/data/size-cases.tsv). Run by ctest:  lua5.1 size-cases.lua SOURCE_DIR
local source = arg[1] or "."
slurm = { SUCCESS = 0, ERROR = -1 }
dofile(source .. "/share/bbkit/slurm/burst_buffer.lua")

local failures, cases = 0, 0
for line in io.lines(source .. "/tests/data/size-cases.tsv") do
    if line ~= "" and string.sub(line, 1, 1) ~= "#" then
        local text, expected = string.match(line, '^"([^"]*)"\t(%S+)$')
        if not text then
            io.stderr:write("malformed line: " .. line .. "\n")
            os.exit(1)
        end
        text = string.gsub(text, "\\t", "\t")
        cases = cases + 1
        local bytes, why = bbkit.parse_capacity(text)
        local got = bytes or "error"
        if got ~= expected then
            failures = failures + 1
            io.stderr:write(string.format("'%s': expected %s, got %s %s\n", text, expected, got,
                why and ("(" .. why .. ")") or ""))
        end
    end
end
print(string.format("%d size cases, %d failures", cases, failures))
if failures > 0 or cases < 40 then
    os.exit(1)
end
