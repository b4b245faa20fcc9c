-- Calls one function of an installed burst_buffer.lua, cli_filter.lua or job_submit.lua the way
-- Slurm's lua plugins do: a `slurm` table shaped like the given release's, every argument a
-- string. Prints "rc=<code>" and then the second return value, if any.
--   lua call-hook.lua [--release RELEASE] SCRIPT FUNCTION [ARG...]
-- RELEASE: 22.05, 23.02, 23.11, 24.05, 24.11, 25.05 or 25.11 (the default), or "none" for no
-- `slurm` table at all (the script loaded outside Slurm). For a slurm_bb_* FUNCTION, or "-"
-- (load only), the script must define every function that release's burst_buffer/lua plugin
-- requires, as the plugin checks when it loads the script (exit 3 otherwise; a script that
-- fails to load exits 3 too, with Lua's message).
-- For slurm_job_submit and slurm_job_modify (job_submit/lua, which requires both), the
-- arguments are Lua expressions: JOB_DESC (a table of the request's fields) and SUBMIT_UID, or
-- JOB_DESC, JOB_REC and MODIFY_UID; the job's description behaves as Slurm's does (its `gres`
-- is tres_per_node, written with the release's prefix on each item). Printed after rc: the
-- description's tres_per_node and how many processes the script started (io.popen and
-- os.execute), "spawned=N"; what it sends the user goes to standard error as
-- "slurm.log_user: ..." (dropped in job_modify by 22.05, as Slurm does).
-- This is Slurm's plugin table, not a stand-in for bbkit: the hooks run the real tools.
-- Runs under Lua 5.1, 5.3 and 5.4.

-- gres_prefix: what job_submit/lua's `gres` puts before each item (gres_prepend_tres_type).
local releases = {
    ["22.05"] = { api = 22.05, gres_prefix = "gres:" },
    ["23.02"] = { api = 23.02, job_info_to_string = true, gres_prefix = "gres:" },
    ["23.11"] = { api = 23.02, job_info_to_string = true, gres_prefix = "gres/" },
    ["24.05"] = { api = 24.05, job_info_to_string = true, busy = true, gres_prefix = "gres/" },
    ["24.11"] = { api = 24.05, busy = true, gres_prefix = "gres/" },
    ["25.05"] = { api = 24.05, busy = true, gres_prefix = "gres/" },
    ["25.11"] = { api = 24.05, busy = true, log_user = true, gres_prefix = "gres/" },
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

local script, name = arg[first], arg[first + 1]
local job_submit = name == "slurm_job_submit" or name == "slurm_job_modify"

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
    if job_submit then
        slurm.ESLURM_ACCESS_DENIED = 2002
        slurm.log_user = function(fmt, ...)
            if name == "slurm_job_modify" and release.api < 23.02 then
                io.stderr:write("slurm.log_error: Use of log.user() in job_modify is not "
                    .. "supported. Message discarded: (\"" .. string.format(fmt, ...) .. "\")\n")
            else
                io.stderr:write("slurm.log_user: " .. string.format(fmt, ...) .. "\n")
            end
        end
    end
end

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

-- The job description job_submit/lua gives the script: its fields read and written through
-- metamethods, `gres` meaning tres_per_node. On modify an emptied field stays "" (Slurm then
-- clears it); on submit it is unset.
local function job_desc(fields, modify)
    local desc = {}
    setmetatable(desc, {
        __index = function(_, key)
            if key == "gres" then
                key = "tres_per_node"
            end
            return fields[key]
        end,
        __newindex = function(_, key, value)
            if key == "gres" then
                key = "tres_per_node"
                if value ~= "" then
                    value = release.gres_prefix .. string.gsub(value, ",", "," .. release.gres_prefix)
                end
            end
            if value == "" and not modify then
                value = nil
            end
            fields[key] = value
        end,
    })
    return desc
end

-- A Lua expression given on the command line.
local function value_of(text)
    local chunk, why = (loadstring or load)("return " .. text)
    if not chunk then
        io.stderr:write("call-hook.lua: " .. tostring(why) .. "\n")
        os.exit(2)
    end
    return chunk()
end

if job_submit then
    for _, fn in ipairs({ "slurm_job_submit", "slurm_job_modify" }) do
        if type(_G[fn]) ~= "function" then
            io.stderr:write(script .. " lacks " .. fn .. ", which job_submit/lua requires\n")
            os.exit(3)
        end
    end
    local spawned = 0
    local popen, execute = io.popen, os.execute
    io.popen = function(...)
        spawned = spawned + 1
        return popen(...)
    end
    os.execute = function(...)
        spawned = spawned + 1
        return execute(...)
    end
    local fields = value_of(arg[first + 2])
    local rc
    if name == "slurm_job_submit" then
        rc = slurm_job_submit(job_desc(fields, false), {}, value_of(arg[first + 3]))
    else
        rc = slurm_job_modify(job_desc(fields, true), value_of(arg[first + 3]), {},
            value_of(arg[first + 4]))
    end
    io.write("rc=" .. tostring(rc) .. "\n")
    io.write("tres_per_node=" .. tostring(fields.tres_per_node) .. "\n")
    io.write("spawned=" .. spawned .. "\n")
    os.exit(0)
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
