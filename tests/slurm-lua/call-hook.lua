-- Calls one function of an installed burst_buffer.lua or cli_filter.lua the way Slurm's lua
-- plugins do: a `slurm` table shaped like the given release's, every argument a string. Prints
-- "rc=<code>" and then the second return value, if any.
--   lua call-hook.lua [--release RELEASE] SCRIPT FUNCTION [ARG...]
-- RELEASE: 22.05, 23.02, 23.11, 24.05, 24.11, 25.05 or 25.11 (the default), or "none" for no
-- `slurm` table at all (the script loaded outside Slurm). For a slurm_bb_* FUNCTION, or "-"
-- (load only), the script must define every function that release's burst_buffer/lua plugin
-- requires, as the plugin checks when it loads the script (exit 3 otherwise; a script that
-- fails to load exits 3 too, with Lua's message).
-- This is Slurm's plugin table, not a stand-in for bbkit: the hooks run the real tools.
-- Runs under Lua 5.1, 5.3 and 5.4.

local releases = {
    ["22.05"] = { api = 22.05 },
    ["23.02"] = { api = 23.02, job_info_to_string = true },
    ["23.11"] = { api = 23.02, job_info_to_string = true },
    ["24.05"] = { api = 24.05, job_info_to_string = true, busy = true },
    ["24.11"] = { api = 24.05, busy = true },
    ["25.05"] = { api = 24.05, busy = true },
    ["25.11"] = { api = 24.05, busy = true, log_user = true },
}

local required = {
    "slurm_bb_job_process", "slurm_bb_pools", "slurm_bb_job_teardown", "slurm_bb_setup",
    "slurm_bb_data_in", "slurm_bb_real_size", "slurm_bb_paths", "slurm_bb_pre_run",
    "slurm_bb_post_run", "slurm_bb_data_out", "slurm_bb_get_status",
}
local required_from_24_05 = { "slurm_bb_test_data_in", "slurm_bb_test_data_out" }

local first = 1
local release_name = "25.11"
if arg[1] == "--release" then
    release_name = arg[2]
    first = 3
end
local release = releases[release_name]
if release_name ~= "none" and not release then
    io.stderr:write("call-hook.lua: unknown release '" .. tostring(release_name) .. "'\n")
    os.exit(2)
end

if release then
    slurm = { SUCCESS = 0, ERROR = -1, FAILURE = -1 }
    for _, level in ipairs({ "error", "info", "verbose", "debug", "debug2", "debug3", "debug4" }) do
        slurm["log_" .. level] = function(fmt, ...)
            io.stderr:write("slurm.log_" .. level .. ": " .. string.format(fmt, ...) .. "\n")
        end
    end
    if release.job_info_to_string then
        slurm.job_info_to_string = function(job_info)
            return "job_info"
        end
    end
    if release.busy then
        slurm.SLURM_BB_BUSY = "BUSY"
    end
    if release.log_user then
        slurm.log_user = slurm.log_info
    end
end

local script, name = arg[first], arg[first + 1]
local loaded, why = pcall(dofile, script)
if not loaded then
    io.stderr:write(script .. " does not load: " .. tostring(why) .. "\n")
    os.exit(3)
end

if release and (name == "-" or string.sub(name, 1, 9) == "slurm_bb_") then
    local needed = {}
    for _, fn in ipairs(required) do
        needed[#needed + 1] = fn
    end
    if release.api >= 24.05 then
        for _, fn in ipairs(required_from_24_05) do
            needed[#needed + 1] = fn
        end
    end
    for _, fn in ipairs(needed) do
        if type(_G[fn]) ~= "function" then
            io.stderr:write(script .. " lacks " .. fn .. ", which Slurm " .. release_name
                .. " requires\n")
            os.exit(3)
        end
    end
    if name == "-" then
        io.write("loaded: " .. #needed .. " required functions\n")
        os.exit(0)
    end
end

local fn = _G[name]
if type(fn) ~= "function" then
    io.stderr:write(script .. " defines no function " .. tostring(name) .. "\n")
    os.exit(2)
end
local args = {}
for i = first + 2, #arg do
    args[#args + 1] = arg[i]
end
local unpack_args = table.unpack or unpack
local rc, message = fn(unpack_args(args, 1, #args))
io.write("rc=" .. tostring(rc) .. "\n")
if message ~= nil then
    io.write(tostring(message))
end
