-- Calls one function of an installed burst_buffer.lua or cli_filter.lua under lua5.1, the way
-- Slurm's lua plugins do: a `slurm` table with the return codes and log functions, every
-- argument a string. Prints "rc=<code>" and then the second return value, if any.
--   lua5.1 call-hook.lua SCRIPT FUNCTION [ARG...]
-- This is Slurm's plugin table, not a stand-in for bbkit: the hooks run the real tools.
slurm = {
    SUCCESS = 0,
    ERROR = -1,
    SLURM_BB_BUSY = "BUSY",
}
for _, level in ipairs({ "error", "info", "verbose", "debug", "debug2", "debug3", "debug4" }) do
    slurm["log_" .. level] = function(fmt, ...)
        io.stderr:write("slurm.log_" .. level .. ": " .. string.format(fmt, ...) .. "\n")
    end
end
slurm.log_user = slurm.log_info

local script, name = arg[1], arg[2]
dofile(script)
local fn = _G[name]
if type(fn) ~= "function" then
    io.stderr:write(script .. " defines no function " .. tostring(name) .. "\n")
    os.exit(2)
end
local args = {}
for i = 3, #arg do
    args[#args + 1] = arg[i]
end
local rc, message = fn(unpack(args))
io.write("rc=" .. tostring(rc) .. "\n")
if message ~= nil then
    io.write(tostring(message))
end
