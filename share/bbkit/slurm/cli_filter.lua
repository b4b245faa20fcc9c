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
themselves is refused: its count is bbkit's to size from the request.
]]

-- ---- install-time settings (install-slurm writes them; keep each on one line) ----------------
BBKIT_BINDIR = ""                -- bb-parse's directory (install-slurm always writes it; "" = PATH)
BBKIT_CONFIG = ""                -- bbkit.toml's absolute name, unless the default; "" = $BBKIT_CONFIG, else /etc/bbkit/bbkit.toml
BBKIT_DIRECTIVE = "BB_LUA"       -- burst_buffer.conf's Directive
BBKIT_PLUGIN = "lua"             -- the burst_buffer plugin: "lua", "datawarp" (#DW and #BB), or "standalone" (none: BBKIT_DIRECTIVES)
BBKIT_DIRECTIVES = ""            -- standalone: every directive of bbkit.toml, blank-separated (bbkit-job reads them all)
BBKIT_NODE_GRES = ""             -- standalone: the node-local pools' GRES, blank-separated (only bbkit asks for them)
-- ---- end of install-time settings ---------------------------------------------------------

local function quote(word)
    return "'" .. string.gsub(word, "'", "'\\''") .. "'"
end

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

-- The directive lines of a script as Slurm's burst_buffer/datawarp plugin collects them
-- (bbkit(7), REQUESTS): up to the first line not starting with '#', every line starting with
-- "#DW" or "#BB" (no blank needed after them), a trailing '\' joining the next such line without
-- its prefix (and without its leading blanks only when a blank came right before the '\').
-- Returns the list of lines, or nil and a message for a #DW line continued on a #BB line (or
-- the reverse), which Slurm refuses. Slurm's datawarp plugin checks persistent-only jobs
-- (#BB create_persistent, destroy_persistent) nowhere at submit: this reading decides which
-- scripts bb-parse checks here.
function bbkit_datawarp_lines(script)
    while string.byte(script, -1) == 0 do
        script = string.sub(script, 1, -2)
    end
    local lines, continuing, blank_before, previous = {}, false, false, nil
    for line in string.gmatch(script, "[^\n]+") do
        if string.sub(line, 1, 1) ~= "#" then
            break
        end
        local kind = string.sub(line, 2, 3)
        if kind == "DW" or kind == "BB" then
            local text = line
            if continuing then
                if kind ~= previous then
                    return nil, "a #" .. previous .. " line continues on a #" .. kind
                        .. " line, which Slurm's datawarp plugin refuses"
                end
                text = string.sub(line, 4)
                if blank_before then
                    text = string.gsub(text, "^%s+", "")
                end
            end
            previous = kind
            local next_continues = string.sub(text, -1) == "\\"
            if next_continues then
                local before = string.sub(line, -2, -2)
                blank_before = #line >= 2 and string.find(before, "^%s$") ~= nil
                text = string.sub(text, 1, -2)
            end
            if continuing then
                lines[#lines] = lines[#lines] .. text
            else
                lines[#lines + 1] = text
            end
            continuing = next_continues
        else
            continuing = false
        end
    end
    return lines
end

-- Whether a batch script holds a directive line in its leading comment block.
local function has_directive(script)
    if BBKIT_PLUGIN == "datawarp" then
        local lines = bbkit_datawarp_lines(script)
        return lines == nil or #lines > 0 -- a refused mix is bb-parse's to explain
    end
    local prefixes = { "#" .. BBKIT_DIRECTIVE }
    if BBKIT_PLUGIN == "standalone" then
        for word in string.gmatch(BBKIT_DIRECTIVES, "%S+") do
            prefixes[#prefixes + 1] = "#" .. word
        end
    end
    for line in string.gmatch(script, "[^\n]+") do
        if string.sub(line, 1, 1) ~= "#" then
            return false
        end
        -- A longer directive starting with a shorter one (#BB_LUA, #BB) is bb-parse's to tell.
        for _, prefix in ipairs(prefixes) do
            if string.sub(line, 1, #prefix) == prefix then
                return true
            end
        end
    end
    return false
end

local function set(value)
    return value ~= nil and value ~= "" and value ~= "unset"
end

-- The bb-parse arguments for this job, or nil when it asks for no burst buffer.
local function bbkit_cli_arguments(options)
    local args = {}
    local wanted = false
    if options["type"] == "sbatch" and not set(options["wrap"]) then
        local argv = options["argv"]
        local script = argv and argv[1]
        if script then
            local text, whole = read_script(script)
            if text and (not whole or has_directive(text)) then
                args[#args + 1] = "--script"
                args[#args + 1] = script
                wanted = true
            end
        end
    end
    if set(options["bb"]) then
        args[#args + 1] = "--bb"
        args[#args + 1] = options["bb"]
        wanted = true
    end
    if set(options["bbf"]) then
        args[#args + 1] = "--bbf"
        args[#args + 1] = options["bbf"]
        wanted = true
    end
    if not wanted then
        return nil
    end
    if set(options["job-name"]) then
        args[#args + 1] = "--job-name"
        args[#args + 1] = options["job-name"]
    end
    local workdir = options["chdir"]
    if not set(workdir) then
        workdir = os.getenv("PWD")
    end
    if set(workdir) then
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
    local words = { quote(BBKIT_BINDIR ~= "" and (BBKIT_BINDIR .. "/bb-parse") or "bb-parse") }
    if BBKIT_CONFIG ~= "" then
        words[#words + 1] = "--config " .. quote(BBKIT_CONFIG)
    end
    for _, arg in ipairs(args) do
        words[#words + 1] = quote(arg)
    end
    words[#words + 1] = "--json"
    -- The submitting user, for the checks that need one (allow_users, deny_users, persistent
    -- buffers without EnablePersistent): bb-parse runs as that user, and says so.
    words[#words + 1] = '--user "$(id -u)"'
    -- Standard output (the JSON) first, then the exit status, then standard error: a JSON line
    -- never starts with "bbkit-exit=", so the first such line ends the JSON whatever the
    -- messages say.
    local line = "{ bbkit_err=$(" .. table.concat(words, " ")
        .. " </dev/null 2>&1 >&3 3>&-); printf '\\nbbkit-exit=%s\\n%s\\n' \"$?\" \"$bbkit_err\"; } 3>&1"
    local handle = io.popen(line, "r")
    if not handle then
        return "bb-parse: could not be started"
    end
    local output = handle:read("*a") or ""
    handle:close()
    local json, status, body = string.match(output, "^(.-)\nbbkit%-exit=(%d+)\n(.*)$")
    if status == "0" then
        return nil, json
    end
    -- bb-parse's error is its whole last line, never an earlier one (see burst_buffer.lua).
    local message
    for text in string.gmatch(body or output, "[^\n]+") do
        message = text
    end
    if message and not string.match(message, "^bb%-parse: ") then
        message = "bb-parse: " .. message
    end
    message = message or ("bb-parse: failed with exit status " .. tostring(status)
        .. " (is bbkit installed on this host?)")
    if not refusing[status] then
        slurm.log_info("bbkit: burst-buffer request not checked at submit (checked again at "
            .. "setup): %s", message)
        return nil
    end
    return message
end

-- The GRES of a job buffer in a node-local pool, as bb-parse --json says it: "NAME:COUNT", NAME
-- as bbkit.toml's gres allows it, COUNT granules per node (bbkit(7), NODE-LOCAL POOLS). Returns
-- nil for a request without one, else NAME and COUNT; nil, nil and a message when the JSON does
-- not say it in that one shape. A key's quotes cannot come from a value: JSON escapes every '"'
-- inside a string.
function bbkit_json_gres(json)
    local seen = 0
    for _ in string.gmatch(json, '"gres"%s*:') do
        seen = seen + 1
    end
    if seen == 0 then
        if string.find(json, '"node_local"%s*:%s*true') then
            return nil, nil, "bbkit: bb-parse --json says node_local but names no gres"
        end
        return nil
    end
    local name, count = string.match(json, '"gres"%s*:%s*"([a-z][a-z0-9_]*):([1-9]%d*)"%s*[,}\n]')
    if seen > 1 or not name or #name > 32 or #count > 19 then
        return nil, nil, "bbkit: bb-parse --json names its gres in a shape this cli_filter does "
            .. "not read (rerun install-slurm after upgrading bbkit)"
    end
    return name, count
end

-- The names of the GRES a --gres value asks for. Slurm keeps each item as given, prefixed with
-- "gres:" (22.05 to 23.02) or "gres/" (23.11 and later): [gres:|gres/]NAME[:TYPE][:COUNT],
-- comma-separated; "none" asks for none.
function bbkit_gres_names(value)
    local names = {}
    if not set(value) or string.lower(value) == "none" then
        return names
    end
    for item in string.gmatch(value, "[^,]+") do
        local rest = string.match(item, "^gres[:/](.+)$")
        while rest do
            item = rest
            rest = string.match(item, "^gres[:/](.+)$")
        end
        names[#names + 1] = string.match(item, "^[^:]*")
    end
    return names
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
    if set(have) and string.lower(have) ~= "none" then
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
