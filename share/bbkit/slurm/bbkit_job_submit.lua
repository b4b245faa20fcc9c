--[[
bbkit's submit check inside slurmctld, for node-local pools (bbkit(7), NODE-LOCAL POOLS):
bbkit_job_submit and bbkit_job_modify, which Slurm's job_submit/lua plugin (JobSubmitPlugins=lua)
reaches through job_submit.lua, bbkit's own or a site's that calls them. Every job passes here,
whatever submitted it: sbatch, salloc and srun with or without bbkit's cli_filter, slurmrestd.

bbkit_job_submit: a job whose batch script holds directives (read as cli_filter.lua reads them,
submit_rules.lua) or whose --bb text is set is read by

    bb-parse [--script FILE] [--bb TEXT] [--job-name N] [--workdir D] --user UID --json

and when its job buffer is in a node-local pool, the job's tres_per_node must hold exactly that
pool's GRES ("NAME:COUNT", bb-parse's gres): added when the job does not name it, the job's own
items kept as they are; a job naming a node-local pool's GRES itself with anything else is
refused (bbkit sizes it), and so is a job naming one without such a request. A job without
directives, --bb or a node-local pool's GRES costs one look at its script's leading comment
block: no process. The script goes to bb-parse in a file made for it in a new directory only
SlurmUser can enter (mktemp -d), removed afterwards.

bbkit_job_modify: a user (not root, not SlurmUser) may not add, remove or resize a node-local
pool's GRES of a job (scontrol update JobId=N Gres=...): bbkit sized it from the request.
Root and SlurmUser may (the node's Prolog still holds the job to what Slurm gave it).

Both fail closed: every refusal is one line, starting "bbkit: ", sent to the user
(slurm.log_user) and to slurmctld's log, with slurm.ERROR; so is any Lua error, caught here
(up to Slurm 25.11 an error in job_submit.lua lets the job through), and a bb-parse that cannot
run or answers in a shape this does not read. An unreadable bbkit.toml refuses only the jobs
that ask for a burst buffer or name a node-local pool's GRES: every other job passes, never
asking bb-parse. Installed by install-slurm --node-local, which fills in the settings.
]]

-- ---- install-time settings (install-slurm writes them; keep each on one line) ----------------
BBKIT_BINDIR = ""                -- bb-parse's directory (install-slurm always writes it; "" = PATH)
BBKIT_CONFIG = ""                -- bbkit.toml's absolute name (install-slurm always writes it)
BBKIT_DIRECTIVE = "BB_LUA"       -- the first of bbkit.toml's directives
BBKIT_PLUGIN = "standalone"      -- no burst_buffer plugin: every directive of BBKIT_DIRECTIVES
BBKIT_DIRECTIVES = ""            -- every directive of bbkit.toml, blank-separated (bbkit-job reads them all)
BBKIT_NODE_GRES = ""             -- the node-local pools' GRES, blank-separated (only bbkit asks for them)
BBKIT_SLURM_UID = "0"            -- SlurmUser's uid: it and root may change a job's bbkit GRES
-- ---- end of install-time settings ---------------------------------------------------------

-- ---- bbkit's submit rules, shared with cli_filter.lua --------------------------------------
-- install-slurm writes submit_rules.lua's text in place of the next line; from the sources it is
-- read from beside this file.
dofile((string.match(debug.getinfo(1, "S").source, "^@(.*/)") or "") .. "submit_rules.lua")
-- ---- end of the submit rules --------------------------------------------------------------

-- The fields of a job's request that name GRES: per node (--gres, --gpus-per-node), per job,
-- socket and task. A node-local pool's GRES belongs in tres_per_node only, sized by bbkit.
local tres_fields = { "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }

-- What a user calls each field.
local field_option = {
    tres_per_node = "--gres", tres_per_job = "tres_per_job", tres_per_socket = "tres_per_socket",
    tres_per_task = "--tres-per-task",
}

-- Text for a message: one line, every control character escaped (\x0a) as bbkit's tools
-- escape what a user chose (ARCHITECTURE.md, "Messages are one line"), at most 1000 bytes.
local function one_line(text)
    text = string.gsub(tostring(text), "%c", function(c)
        return string.format("\\x%02x", string.byte(c))
    end)
    if #text > 1000 then
        text = string.sub(text, 1, 1000) .. "..."
    end
    return text
end

-- Whether NAME is one of the node-local pools' GRES (in any case: Slurm's are not bbkit's to
-- tell apart by case).
local function is_bbkit_gres(name)
    name = string.lower(name)
    for word in string.gmatch(BBKIT_NODE_GRES, "%S+") do
        if name == word then
            return true
        end
    end
    return false
end

-- The items naming a node-local pool's GRES in the value of a GRES field, without Slurm's
-- prefix ("bbnvme:600"), in order.
local function bbkit_items(value)
    local items = {}
    for _, item in ipairs(bbkit_gres_items(value)) do
        if is_bbkit_gres(string.match(item, "^[^:]*")) then
            items[#items + 1] = item
        end
    end
    return items
end

-- The node-local pools' GRES a job names itself, in any field: a list of {field, item}.
local function own_bbkit_gres(job_desc)
    local own = {}
    for _, field in ipairs(tres_fields) do
        for _, item in ipairs(bbkit_items(job_desc[field])) do
            own[#own + 1] = { field = field, item = item }
        end
    end
    return own
end

-- The refusal of a job naming a node-local pool's GRES itself. WANTED: the GRES bbkit sized
-- from its request, nil for a job without one.
local function own_gres_message(own, wanted)
    local why = "the GRES bbkit sizes from a burst-buffer request (#" .. BBKIT_DIRECTIVE
        .. " pool=... capacity=...)"
    if wanted then
        why = "the GRES bbkit sizes from the burst-buffer request (" .. wanted .. " here)"
    end
    return "bbkit: " .. field_option[own.field] .. " asks for " .. own.item .. " itself, " .. why
        .. ": remove it from the job's " .. field_option[own.field]
end

-- A new directory only slurmctld's user can enter (mktemp -d: mode 0700, a random name under
-- $TMPDIR, else /tmp), for the job's script: never a name another user could guess or make
-- first. Returns its name, else nil and a one-line message.
local function private_directory()
    local handle = io.popen("umask 077 && mktemp -d \"${TMPDIR:-/tmp}/bbkit-job.XXXXXXXXXX\" 2>&1", "r")
    if not handle then
        return nil, "bbkit: mktemp could not be started for the job's script"
    end
    local output = handle:read("*a") or ""
    handle:close()
    local dir = string.match(output, "^(/[^\n]+)\n$")
    if not dir then
        return nil, "bbkit: mktemp -d failed for the job's script: " .. one_line(output)
    end
    return dir
end

-- Writes the job's script to FILE; returns nil, else a one-line message.
local function write_script(file, script)
    local f, why = io.open(file, "wb")
    if not f then
        return "bbkit: cannot write the job's script for bb-parse: " .. one_line(why)
    end
    local written, write_error = f:write(script)
    local closed, close_error = f:close()
    if not written or not closed then
        return "bbkit: cannot write the job's script for bb-parse: "
            .. one_line(write_error or close_error)
    end
    return nil
end

-- bb-parse's arguments for the job, besides --script: its --bb text, name, working directory
-- (for %x and %d) and user (for %u and allow_users, deny_users).
local function bb_parse_arguments(job_desc)
    local args = {}
    if bbkit_set(job_desc.burst_buffer) then
        args[#args + 1] = "--bb"
        args[#args + 1] = job_desc.burst_buffer
    end
    if bbkit_set(job_desc.name) then
        args[#args + 1] = "--job-name"
        args[#args + 1] = job_desc.name
    end
    if bbkit_set(job_desc.work_dir) then
        args[#args + 1] = "--workdir"
        args[#args + 1] = job_desc.work_dir
    end
    args[#args + 1] = "--user"
    args[#args + 1] = string.format("%d", job_desc.user_id)
    return args
end

-- Runs bb-parse on the job's request, the script (when it holds directives) in a private file,
-- removed whatever happens. Returns bb-parse's JSON, else nil and a one-line message.
local function parse_request(job_desc, with_script)
    local args = bb_parse_arguments(job_desc)
    local dir, file, problem
    if with_script then
        dir, problem = private_directory()
        if not dir then
            return nil, problem
        end
        file = dir .. "/script"
        table.insert(args, 1, file)
        table.insert(args, 1, "--script")
    end
    local ran, status, json, message = pcall(function()
        local failed = file and write_script(file, job_desc.script)
        if failed then
            return "not run", nil, failed
        end
        return bbkit_run_bb_parse(args)
    end)
    if dir then
        os.remove(file)
        if not os.remove(dir) then
            slurm.log_error("bbkit: could not remove %s", dir)
        end
    end
    if not ran then
        error(status, 0)
    end
    if status == "not run" then
        return nil, message
    end
    if status ~= "0" then
        return nil, "bbkit: " .. one_line(message or "bb-parse: no answer")
    end
    -- bb-parse's request, whatever it holds, names these two keys (a value's quotes are escaped).
    if not string.find(json, '^%s*{') or not string.find(json, '"has_directive"%s*:%s*[tf]')
        or not string.find(json, '"job_buffer"%s*:') then
        return nil, "bbkit: bb-parse --json printed no request bbkit's job_submit.lua reads "
            .. "(rerun install-slurm after upgrading bbkit)"
    end
    return json
end

-- Writes ITEM ("NAME:COUNT") into the job's tres_per_node after the job's own items, which stay
-- as they are. Written through the job's `gres` first, so that Slurm prefixes it as its release
-- does ("gres:" up to 23.02, "gres/" from 23.11), then appended to the job's items; read back
-- each time, since Slurm says nothing when a field is not taken. Returns nil, else a message.
local function add_gres(job_desc, item)
    local have = job_desc.tres_per_node
    job_desc.gres = item
    local mine = job_desc.tres_per_node
    local mine_items = bbkit_gres_items(mine)
    local wanted = mine
    if #mine_items == 1 and mine_items[1] == item and #bbkit_gres_items(have) > 0 then
        wanted = have .. "," .. mine
        job_desc.tres_per_node = wanted
    end
    if #mine_items ~= 1 or mine_items[1] ~= item or job_desc.tres_per_node ~= wanted then
        return "bbkit: could not add " .. item .. " to the job's GRES (Slurm did not take it)"
    end
    return nil
end

-- The check of a new job: nil when it may go on (its GRES sized), else a one-line message.
local function check_job(job_desc)
    local own = own_bbkit_gres(job_desc)
    local with_script = job_desc.script ~= nil and bbkit_has_directive(job_desc.script)
    if not with_script and not bbkit_set(job_desc.burst_buffer) then
        return own[1] and own_gres_message(own[1]) or nil
    end
    local json, problem = parse_request(job_desc, with_script)
    if not json then
        return problem
    end
    local name, count
    name, count, problem = bbkit_json_gres(json)
    if problem then
        return problem
    end
    if not name then
        return own[1] and own_gres_message(own[1]) or nil
    end
    local wanted = name .. ":" .. count
    if #own == 0 then
        return add_gres(job_desc, wanted)
    end
    -- A job from sbatch, salloc or srun through bbkit's cli_filter has it already.
    if #own == 1 and own[1].field == "tres_per_node" and own[1].item == wanted then
        return nil
    end
    for _, given in ipairs(own) do
        if given.field ~= "tres_per_node" or given.item ~= wanted then
            return own_gres_message(given, wanted)
        end
    end
    return own_gres_message(own[2], wanted) -- the same GRES twice
end

-- The node-local pools' GRES of a GRES field's value, as one text to compare ("" for none).
local function bbkit_gres_key(value)
    local items = {}
    for _, item in ipairs(bbkit_items(value)) do
        local name, rest = string.match(item, "^([^:]*)(.*)$")
        items[#items + 1] = string.lower(name) .. rest
    end
    table.sort(items)
    return table.concat(items, ",")
end

-- The check of a change to a job: nil when it may go on, else a one-line message. Slurm gives
-- only the fields that change; job_rec is the job as it is.
local function check_change(job_desc, job_rec, modify_uid)
    if modify_uid == 0 or modify_uid == tonumber(BBKIT_SLURM_UID) then
        return nil
    end
    for _, field in ipairs(tres_fields) do
        local new = job_desc[field]
        if new ~= nil then
            local old = job_rec and job_rec[field]
            local before, after = bbkit_gres_key(old), bbkit_gres_key(new)
            if before ~= after then
                return "bbkit: a user may not add, remove or resize a node-local pool's GRES ("
                    .. BBKIT_NODE_GRES .. ") of a job: bbkit sized it from the job's burst-buffer "
                    .. "request (" .. (before ~= "" and before or "none") .. " here; the change "
                    .. "asks for " .. (after ~= "" and after or "none") .. "): root or SlurmUser may"
            end
        end
    end
    return nil
end

-- Runs CHECK(...) and answers Slurm: slurm.SUCCESS when it returned nil, else the refusal
-- (REFUSAL, slurm.ERROR when nil) with its one-line message to the user and to slurmctld's log.
-- A Lua error is a refusal too: up to Slurm 25.11 a job_submit.lua that raises one lets the job
-- through, so none leaves here.
local function fail_closed(refusal, check, ...)
    local ok, problem = pcall(check, ...)
    if ok and problem == nil then
        return slurm.SUCCESS
    end
    if not ok then
        problem = "bbkit: job_submit.lua failed, so the job is refused: " .. tostring(problem)
    end
    problem = one_line(problem) -- the job's own text in it too (a GRES item, a name)
    pcall(slurm.log_info, "%s", problem)
    pcall(slurm.log_user, "%s", problem)
    return refusal or slurm.ERROR or -1
end

-- slurm_job_submit's work: a site's own job_submit.lua calls it with Slurm's arguments and
-- refuses the job when it does not return slurm.SUCCESS.
function bbkit_job_submit(job_desc, part_list, submit_uid) -- luacheck: no unused args
    return fail_closed(nil, check_job, job_desc)
end

-- slurm_job_modify's work, called the same way. A change is refused with
-- ESLURM_ACCESS_DENIED, which Slurm 22.05 shows the user (it drops slurm.log_user's text in
-- job_modify; 23.02 and later show it).
function bbkit_job_modify(job_desc, job_rec, part_list, modify_uid) -- luacheck: no unused args
    return fail_closed(slurm.ESLURM_ACCESS_DENIED, check_change, job_desc, job_rec, modify_uid)
end
