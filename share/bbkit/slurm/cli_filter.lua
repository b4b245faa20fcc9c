--[[
bbkit's cli_filter.lua for Slurm's cli_filter/lua plugin (CliFilterPlugins=cli_filter/lua).

Runs in sbatch, salloc and srun, as the submitting user, before the job is sent: when the job
asks for a burst buffer (--bb, --bbf, or directives in the batch script named on the command
line) it runs

    bb-parse --check-sources [--script FILE] [--bb TEXT] [--bbf FILE] [--job-name N] [--workdir D]
             --user UID

so an invalid request, a user who may not ask for it (allow_users, deny_users, persistent
buffers without EnablePersistent), or a stage-in source that is missing or unreadable by the user, is
refused at submit time with bbkit's one-line message ("sbatch: error: lua: bb-parse: ...":
Slurm prefixes a Lua error with "lua: "). When the check itself cannot run on this host (no
bb-parse, an unreadable bbkit.toml) the job goes on with a logged note. A
script read from standard input cannot be seen here; slurm_bb_setup validates every job again
(a client-side filter can be bypassed). Installed by install-slurm, which fills in the settings.

A job buffer in a node-local pool (bbkit(7), NODE-LOCAL POOLS) is counted by Slurm as a GRES:
bb-parse --json says which and how much per node ("gres": "NAME:COUNT") and this filter adds it
to the job's --gres (after the user's own, comma-separated). A user who asks for that GRES
themselves is refused: its count is bbkit's to size from the request. A client-side filter can
be bypassed (slurmrestd runs none, and a user may run sbatch with a slurm.conf of their own):
slurmctld's job_submit.lua (bbkit_job_submit.lua) holds every job to the same rules again.
The rules both read the same way are in submit_rules.lua.
]]

-- ---- install-time settings (install-slurm writes them; keep each on one line) ----------------
BBKIT_BINDIR = ""                -- bb-parse's directory (install-slurm always writes it; "" = PATH)
BBKIT_CONFIG = ""                -- bbkit.toml's absolute name, unless the default; "" = $BBKIT_CONFIG, else /etc/bbkit/bbkit.toml
BBKIT_DIRECTIVE = "BB_LUA"       -- burst_buffer.conf's Directive
BBKIT_PLUGIN = "lua"             -- the burst_buffer plugin: "lua", "datawarp" (#DW and #BB), or "standalone" (none: BBKIT_DIRECTIVES)
BBKIT_DIRECTIVES = ""            -- standalone: every directive of bbkit.toml, blank-separated (bbkit-job reads them all)
BBKIT_NODE_GRES = ""             -- standalone: the node-local pools' GRES, blank-separated (only bbkit asks for them)
-- ---- end of install-time settings ---------------------------------------------------------

-- ---- bbkit's submit rules, shared with bbkit_job_submit.lua ---------------------------------
-- install-slurm writes submit_rules.lua's text in place of the next line; from the sources it is
-- read from beside this file.
dofile((string.match(debug.getinfo(1, "S").source, "^@(.*/)") or "") .. "submit_rules.lua")
-- ---- end of the submit rules --------------------------------------------------------------

-- The most of a batch script read here: [limits] script_size's default. A longer one is
-- bb-parse's to judge, which knows the configured limit.
local script_read_bytes = 4 * 1024 * 1024

-- A script's text (nil when it cannot be read) and whether it is whole (not longer than
-- script_read_bytes).
local function read_script(path)
    local f = io.open(path, "rb")
    if not f then
        return nil
    end
    local text = f:read(script_read_bytes + 1) or ""
    f:close()
    return text, #text <= script_read_bytes
end

-- The bb-parse arguments for this job, or nil when it asks for no burst buffer.
local function bbkit_cli_arguments(options)
    local args = {}
    local wanted = false
    if options["type"] == "sbatch" and not bbkit_set(options["wrap"]) then
        local argv = options["argv"]
        local script = argv and argv[1]
        if script then
            local text, whole = read_script(script)
            if text and (not whole or bbkit_has_directive(text)) then
                args[#args + 1] = "--script"
                args[#args + 1] = script
                wanted = true
            end
        end
    end
    if bbkit_set(options["bb"]) then
        args[#args + 1] = "--bb"
        args[#args + 1] = options["bb"]
        wanted = true
    end
    if bbkit_set(options["bbf"]) then
        args[#args + 1] = "--bbf"
        args[#args + 1] = options["bbf"]
        wanted = true
    end
    if not wanted then
        return nil
    end
    if bbkit_set(options["job-name"]) then
        args[#args + 1] = "--job-name"
        args[#args + 1] = options["job-name"]
    end
    local workdir = options["chdir"]
    if not bbkit_set(workdir) then
        workdir = os.getenv("PWD")
    end
    if bbkit_set(workdir) then
        args[#args + 1] = "--workdir"
        args[#args + 1] = workdir
    end
    args[#args + 1] = "--check-sources"
    return args
end

-- bb-parse's exit statuses that mean "this request is wrong": invalid (65), a missing source
-- or unknown pool (66), a source the user cannot read (77). Anything else means the check
-- itself could not run here (no bbkit, an unreadable configuration): the job is let through,
-- with a warning, and slurm_bb_setup validates it on the controller.
local refusing = { ["65"] = true, ["66"] = true, ["77"] = true }

-- Runs bb-parse; returns nil when the request may go on, else bb-parse's one-line message.
-- The second value is bb-parse's JSON for the request when it was checked (nil when the check
-- could not run here).
local function bbkit_cli_check(args)
    -- The submitting user, for the checks that need one (allow_users, deny_users, persistent
    -- buffers without EnablePersistent): bb-parse runs as that user, and says so.
    local status, json, message = bbkit_run_bb_parse(args, '--user "$(id -u)"')
    if status == "0" then
        return nil, json
    end
    if not refusing[status] then
        slurm.log_info("bbkit: burst-buffer request not checked at submit (checked again at "
            .. "setup): %s", message)
        return nil
    end
    return message
end

-- Adds the job buffer's GRES to the job's --gres; returns nil, else a one-line message. Slurm's
-- cli_filter/lua sets an option written into the table (slurm_option_set) but says nothing
-- when that fails: the value is read back.
function bbkit_cli_add_gres(options, json)
    local name, count, problem = bbkit_json_gres(json or "")
    if problem then
        return problem
    end
    if not name then
        return nil
    end
    local have = options["gres"]
    for _, given in ipairs(bbkit_gres_names(have)) do
        if string.lower(given) == name then
            return "bbkit: --gres asks for " .. given .. " itself, the GRES bbkit sizes from the "
                .. "burst-buffer request (" .. name .. ":" .. count .. " here): remove it from "
                .. "--gres (and #SBATCH --gres)"
        end
    end
    local wanted = name .. ":" .. count
    if bbkit_set(have) and string.lower(have) ~= "none" then
        wanted = have .. "," .. wanted
    end
    options["gres"] = wanted
    for _, given in ipairs(bbkit_gres_names(options["gres"])) do
        if given == name then
            return nil
        end
    end
    return "bbkit: could not add --gres " .. name .. ":" .. count .. " to the job (Slurm did not "
        .. "take --gres=" .. wanted .. ")"
end

-- A node-local pool's GRES is bbkit's to ask for (bbkit(7), NODE-LOCAL POOLS): a job naming one
-- in its own --gres is refused, whether it asks for a burst buffer or not (one that does not
-- would hold space on its nodes that no buffer uses). Returns nil, else a one-line message.
local function bbkit_cli_own_gres(options)
    for _, given in ipairs(bbkit_gres_names(options["gres"])) do
        for name in string.gmatch(BBKIT_NODE_GRES, "%S+") do
            if string.lower(given) == name then
                return "bbkit: --gres asks for " .. given .. " itself, the GRES bbkit sizes from "
                    .. "a burst-buffer request (#" .. BBKIT_DIRECTIVE .. " pool=... capacity=...): "
                    .. "remove it from --gres (and #SBATCH --gres)"
            end
        end
    end
    return nil
end

-- The hooks take Slurm's arguments, whether used or not.
function slurm_cli_setup_defaults(options, early_pass) -- luacheck: no unused args
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset) -- luacheck: no unused args
    local problem = bbkit_cli_own_gres(options)
    if problem then
        slurm.log_error("%s", problem)
        return slurm.ERROR
    end
    local args = bbkit_cli_arguments(options)
    if not args then
        return slurm.SUCCESS
    end
    local json
    problem, json = bbkit_cli_check(args)
    if not problem then
        problem = bbkit_cli_add_gres(options, json)
    end
    if problem then
        slurm.log_error("%s", problem)
        return slurm.ERROR
    end
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id) -- luacheck: no unused args
    return slurm.SUCCESS
end
