--[[
bbkit's burst_buffer.lua for Slurm's burst_buffer/lua plugin (Lua 5.1, 5.3 or 5.4: whichever
the plugin links).

Install it with install-slurm(bbkit(7), "Use with Slurm"), which fills in the settings below
from the effective bbkit configuration and checks the result with the luac of the Lua Slurm
links. Rerun install-slurm after changing bbkit.toml's state_dir, cluster or directives, and
after upgrading Slurm: the script refuses to load under a Slurm whose hook signatures are not
SLURM_API's (it tells them from the `slurm` table Slurm prepares).

What each hook does:
  in slurmctld (must not fork, must be fast):
    slurm_bb_job_process  Slurm's own view of capacity=/pool= checked against bbkit's rules
                          and against the pool's total from pools.json (no fork)
    slurm_bb_pools        returns <state>/pools.json as it is (no fork)
    slurm_bb_paths        copies <state>/env/<cluster>.<job>.env into Slurm's path file
  in slurmscriptd (one process per call; Slurm kills its whole process group on cancel or
  timeout, and every tool stays in that group):
    slurm_bb_setup        bb-pool alloc (never refused for capacity in Slurm mode)
    slurm_bb_data_in      bb-stage in (the copy runs inside this call)
    slurm_bb_test_data_in 24.05+: bb-stage in --check (done as bb-stage in decides; BUSY only
                          while a stage started elsewhere still runs)
    slurm_bb_real_size    the allocated size in bytes
    slurm_bb_pre_run      bb-stage pre-run
    slurm_bb_post_run     bb-stage post-run
    slurm_bb_data_out     bb-stage out (durable before it returns)
    slurm_bb_test_data_out 24.05+: bb-stage out --check, as test_data_in
    slurm_bb_job_teardown bb-teardown (--hurry when Slurm says "true")
    slurm_bb_get_status   bb-stat pools | burst | job <digits>, nothing else

A failing tool's one-line message ("bb-stage: ...") is returned with slurm.ERROR, so the job's
Reason names what failed.
]]

-- ---- install-time settings (install-slurm writes them; keep each on one line) ----------------
BBKIT_BINDIR = ""                -- the tools' directory (install-slurm always writes it; "" = PATH)
BBKIT_CONFIG = ""                -- bbkit.toml's absolute name (install-slurm always writes it; "" = the tools' default); never passed through sudo
BBKIT_STATE_DIR = "/var/lib/bbkit" -- where pools.json and env/ are read; passed as --state-dir (not through sudo)
BBKIT_CLUSTER = "main"           -- bbkit.toml's cluster (part of the env file's name)
BBKIT_DIRECTIVE = "BB_LUA"       -- burst_buffer.conf's Directive = bbkit.toml's directives[1]
SLURM_API = "22.05"              -- "22.05" | "23.02" | "24.05": which hook signatures Slurm uses
BBKIT_SUDO = "auto"              -- "auto": sudo -n when not root | "always" | "never"
-- ---- end of install-time settings ---------------------------------------------------------

bbkit = {}

-- Slurm's return codes (the plugin sets slurm.SUCCESS and slurm.ERROR; the fallbacks let the
-- script be loaded by the tests).
local function success_code()
    return (slurm and slurm.SUCCESS) or 0
end
local function error_code()
    return (slurm and slurm.ERROR) or -1
end
local function log_error(fmt, ...)
    if slurm and slurm.log_error then
        slurm.log_error(fmt, ...)
    end
end

-- ---- sizes: the same grammar as bbkit's parse_capacity (lib/bbkit/size.cpp) ------------------

local multipliers = {
    [""] = { 1024, 0 },
    k = { 1024, 1 }, kib = { 1024, 1 }, kb = { 1000, 1 },
    m = { 1024, 2 }, mib = { 1024, 2 }, mb = { 1000, 2 },
    g = { 1024, 3 }, gib = { 1024, 3 }, gb = { 1000, 3 },
    t = { 1024, 4 }, tib = { 1024, 4 }, tb = { 1000, 4 },
    p = { 1024, 5 }, pib = { 1024, 5 }, pb = { 1000, 5 },
}

-- Decimal strings of digits, compared and multiplied exactly (Lua 5.1 numbers are doubles).
local function strip_zeros(digits)
    local s = string.gsub(digits, "^0+", "")
    if s == "" then
        return "0"
    end
    return s
end

function bbkit.decimal_compare(a, b)
    a, b = strip_zeros(a), strip_zeros(b)
    if #a ~= #b then
        return (#a < #b) and -1 or 1
    end
    if a == b then
        return 0
    end
    return (a < b) and -1 or 1
end

function bbkit.decimal_multiply(a, b)
    a, b = strip_zeros(a), strip_zeros(b)
    local result = {}
    for i = 1, #a + #b do
        result[i] = 0
    end
    for i = #a, 1, -1 do
        local carry = 0
        local da = string.byte(a, i) - 48
        for j = #b, 1, -1 do
            local k = i + j
            local v = result[k] + da * (string.byte(b, j) - 48) + carry
            result[k] = v % 10
            carry = math.floor(v / 10)
        end
        local k = i
        while carry > 0 do
            local v = result[k] + carry
            result[k] = v % 10
            carry = math.floor(v / 10)
            k = k - 1
        end
    end
    return strip_zeros(table.concat(result))
end

local max_size = "9223372036854775807" -- 2^63 - 1, as bbkit's max_size

-- Returns the size in bytes as a decimal string, or nil and why.
function bbkit.parse_capacity(text)
    local digits, unit = string.match(text, "^(%d+)(%a*)$")
    if not digits then
        return nil, "invalid size '" .. text .. "' (write an integer and a unit: 100GiB, 4GB, 1024)"
    end
    local lower = string.lower(unit)
    if lower == "n" or lower == "node" or lower == "nodes" then
        return nil, "a node count ('" .. text .. "') is not a capacity (give bytes: 100GiB)"
    end
    local mult = multipliers[lower]
    if not mult then
        return nil, "unknown unit in size '" .. text .. "' (K M G T P, KiB ... PiB, KB ... PB)"
    end
    local bytes = strip_zeros(digits)
    if bytes == "0" then
        return nil, "size '" .. text .. "' is zero (ask for some space, or no capacity= at all)"
    end
    for _ = 1, mult[2] do
        bytes = bbkit.decimal_multiply(bytes, tostring(mult[1]))
        if bbkit.decimal_compare(bytes, max_size) > 0 then
            break
        end
    end
    if bbkit.decimal_compare(bytes, max_size) > 0 then
        return nil, "size '" .. text .. "' is too large (at most 2^63-1 bytes)"
    end
    return bytes
end

-- ---- small helpers ---------------------------------------------------------------------------

local function read_file(path)
    local f, why = io.open(path, "rb")
    if not f then
        return nil, why
    end
    local text = f:read("*a")
    f:close()
    return text
end

-- The most of a job script read here: [limits] script_size's default. A longer script (or one
-- that grew past it) is read no further; the tools, which know the configured limit, judge it.
bbkit.script_read_bytes = 4 * 1024 * 1024

-- A job script's text, or nil and why; `whole` is false when it is longer than
-- bbkit.script_read_bytes (the text is then its first bytes only).
function bbkit.read_script(path)
    local f, why = io.open(path, "rb")
    if not f then
        return nil, why
    end
    local text = f:read(bbkit.script_read_bytes + 1) or ""
    f:close()
    if #text > bbkit.script_read_bytes then
        return string.sub(text, 1, bbkit.script_read_bytes), nil, false
    end
    return text, nil, true
end

function bbkit.shell_quote(word)
    return "'" .. string.gsub(word, "'", "'\\''") .. "'"
end

-- sudo -n when not root ("auto"), read from /proc without forking.
local function running_as_root()
    local status = read_file("/proc/self/status")
    local uid = status and string.match(status, "\nUid:%s+(%d+)")
    return uid == "0"
end

local function use_sudo()
    if BBKIT_SUDO == "always" then
        return true
    end
    if BBKIT_SUDO == "never" then
        return false
    end
    return not running_as_root()
end

local tools_with_state_dir = {
    ["bb-pool"] = true, ["bb-stage"] = true, ["bb-teardown"] = true, ["bb-stat"] = true,
}

-- The shell line that runs one tool: every word quoted, stdin from /dev/null, stderr with
-- stdout, and the exit status appended (io.popen():close() gives none in Lua 5.1).
function bbkit.command_line(tool, args)
    local words = {}
    local sudo = use_sudo()
    if sudo then
        words[#words + 1] = "sudo -n"
    end
    local path = tool
    if BBKIT_BINDIR ~= "" then
        path = BBKIT_BINDIR .. "/" .. tool
    end
    words[#words + 1] = bbkit.shell_quote(path)
    -- Through sudo the tools refuse to be told which files root reads: they use root's own
    -- configuration (install-slurm checks that it is the one named here).
    if BBKIT_CONFIG ~= "" and not sudo then
        words[#words + 1] = "--config " .. bbkit.shell_quote(BBKIT_CONFIG)
    end
    if tools_with_state_dir[tool] and BBKIT_STATE_DIR ~= "" and not sudo then
        words[#words + 1] = "--state-dir " .. bbkit.shell_quote(BBKIT_STATE_DIR)
    end
    for _, arg in ipairs(args) do
        words[#words + 1] = bbkit.shell_quote(arg)
    end
    return table.concat(words, " ") .. " </dev/null 2>&1; echo \"bbkit-exit=$?\""
end

-- The tool's error: its whole last line (a tool's error is one line, with whatever the user
-- chose escaped, and printed last). An earlier line is never taken, even one that looks like an
-- error, so text a user put in a file or job name cannot stand in for the message.
local function failure_message(tool, output, status)
    local last_line
    for line in string.gmatch(output, "[^\n]+") do
        last_line = line
    end
    if last_line and string.match(last_line, "^bb%-[%w%-]+: ") then
        return last_line
    end
    if last_line then
        return tool .. ": " .. last_line
    end
    if status == nil then
        return tool .. ": could not be run"
    end
    return tool .. ": failed with exit status " .. status
end

-- Runs a tool; returns its exit status (nil when the shell said nothing), its output without
-- the status line, and the one-line message to show when it failed.
function bbkit.run_tool(tool, args)
    local handle = io.popen(bbkit.command_line(tool, args), "r")
    if not handle then
        return nil, "", tool .. ": could not be started"
    end
    local output = handle:read("*a") or ""
    handle:close()
    local status
    local body, code = string.match(output, "^(.-)bbkit%-exit=(%d+)\n?$")
    if body then
        output = body
        status = tonumber(code)
    end
    return status, output, failure_message(tool, output, status)
end

local function call(tool, args, ok_statuses)
    local status, output, message = bbkit.run_tool(tool, args)
    if status == 0 or (ok_statuses and status and ok_statuses[status]) then
        return success_code(), output
    end
    log_error("bbkit: %s", message)
    return error_code(), message
end

-- ---- Slurm's view of a job script --------------------------------------------------------------

-- The directive lines as Slurm's lua plugin collects them: up to the first line not starting
-- with '#', lines starting with '#' .. Directive, a trailing '\' joining the next directive
-- line (without its prefix, and without its leading blanks only when a blank came right before
-- the '\'; bbkit(7), REQUESTS). Returns a list of {text = line after the directive, raw = first
-- line}.
function bbkit.directive_lines(script, directive)
    -- Slurm's trailing NUL bytes (a loop: "%z" is gone from Lua 5.2's patterns, and Lua 5.1's
    -- patterns cannot hold a NUL).
    while string.byte(script, -1) == 0 do
        script = string.sub(script, 1, -2)
    end
    local lines, continuing, blank_before = {}, false, false
    local prefix = "#" .. directive
    for line in string.gmatch(script, "[^\n]+") do
        if string.sub(line, 1, 1) ~= "#" then
            break
        end
        if string.sub(line, 1, #prefix) == prefix then
            local body = string.sub(line, #prefix + 1)
            -- The text Slurm looks at for the blank before a '\': the whole first line, or what
            -- is left of a continued one (a lone '\' looks at what was skipped before it).
            local piece, stripped = line, false
            if continuing then
                if blank_before then
                    local rest = string.gsub(body, "^%s+", "")
                    stripped = rest ~= body
                    body = rest
                end
                piece = body
                lines[#lines].text = lines[#lines].text .. body
            else
                lines[#lines + 1] = { text = body, raw = line }
            end
            continuing = string.sub(body, -1) == "\\"
            if continuing then
                if #piece >= 2 then
                    blank_before = string.find(string.sub(piece, -2, -2), "^%s$") ~= nil
                else
                    blank_before = stripped
                end
                local current = lines[#lines].text
                lines[#lines].text = string.sub(current, 1, -2)
            end
        else
            continuing = false
        end
    end
    return lines
end

-- pools.json as Slurm reads it: {id -> {quantity=digits, granularity=digits}}.
function bbkit.read_pools(path)
    local text, why = read_file(path)
    if not text then
        return nil, why
    end
    local pools = {}
    for object in string.gmatch(text, "{[^{}]*}") do
        local id = string.match(object, '"id"%s*:%s*"([^"]*)"')
        local quantity = string.match(object, '"quantity"%s*:%s*(%d+)')
        local granularity = string.match(object, '"granularity"%s*:%s*(%d+)')
        if id and quantity and granularity then
            pools[id] = { quantity = quantity, granularity = granularity }
        end
    end
    return pools
end

local function starts_word(text, at)
    return at == 1 or string.match(string.sub(text, at - 1, at - 1), "%s") ~= nil
end

-- bb-parse's bounds on directive values (bb-parse(1), LIMITS): a path holds at most PATH_MAX - 1
-- bytes, every other value and every key at most 256.
bbkit.max_path_bytes = 4095
bbkit.max_word_bytes = 256
local path_keys = { source = true, destination = true }

-- The bounds checked on a directive line as bb-parse reads its values as written: quotes
-- group and are dropped, \" is a quote, \\ stays two characters, but the two of a value's \\
-- (the mark that stops symbol replacement, which canonical lines put) are not counted. Words
-- are split at blanks here, so a quoted value with a blank is measured in part: never more
-- than bb-parse counts, which checks again, after symbol replacement, at setup. Returns nil
-- or the message.
function bbkit.check_lengths(text)
    local quoted = false
    for word in string.gmatch(text, "%S+") do
        local plain = string.gsub(word, '\\([\\"])', function(c)
            return c == '"' and "q" or "bb"
        end)
        local starts_quoted = quoted
        local unquoted, quotes = string.gsub(plain, '"', "")
        quoted = (quotes % 2 == 1) ~= quoted
        local key, value = string.match(unquoted, "^([^=]+)=(.*)$")
        -- A '=' after a quote may be inside it: then bb-parse reads no key there.
        local written_key = string.match(word, "^[^=]*")
        if key and not starts_quoted and not string.find(written_key, '"', 1, true) then
            if #key > bbkit.max_word_bytes then
                return "a word of " .. #key .. " bytes (a key or word holds at most "
                    .. bbkit.max_word_bytes .. " bytes)"
            end
            local limit = path_keys[key] and bbkit.max_path_bytes or bbkit.max_word_bytes
            local size = #value
            if string.find(word, "\\\\", 1, true) then
                size = size - 2
            end
            if size > limit then
                return key .. "= is " .. size .. " bytes long ("
                    .. (path_keys[key] and "a path" or "a value") .. " holds at most " .. limit
                    .. " bytes)"
            end
        end
    end
    return nil
end

-- Cheap checks at submit (no fork): values within bb-parse's bounds, Slurm's view of capacity=
-- and pool= equals bbkit's, and the request fits the pool's total. Returns nil when acceptable,
-- else the message.
function bbkit.check_request(script, directive, pools)
    local buffer_line
    for _, line in ipairs(bbkit.directive_lines(script, directive)) do
        local after = string.sub(line.raw, #directive + 2, #directive + 2)
        if after ~= "" and not string.match(after, "%s") then
            return "'" .. line.raw .. "': write #" .. directive .. " followed by a blank"
        end
        local too_long = bbkit.check_lengths(line.text)
        if too_long then
            return too_long
        end
        if string.find(line.text, "capacity=", 1, true) then
            local first_word = string.match(line.text, "^%s*(%S+)") or ""
            if first_word ~= "jobdw" and not string.find(first_word, "=", 1, true) then
                return "capacity= appears in a '" .. first_word .. "' line; Slurm would read it "
                    .. "as the buffer's size (put capacity= and pool= on the buffer line only)"
            end
            if buffer_line then
                return "only one #" .. directive .. " line may hold capacity= (one buffer per job; "
                    .. "Slurm would add them up)"
            end
            buffer_line = line
        end
    end
    if not buffer_line then
        return nil -- no space asked: setup validates the rest
    end
    local text = buffer_line.text
    local function single_word(key)
        local at = string.find(text, key .. "=", 1, true)
        if not at then
            return nil, key .. "= is missing on the buffer line (Slurm needs pool= with capacity=)"
        end
        if not starts_word(text, at) then
            return nil, "'" .. key .. "=' is part of another word on the buffer line; Slurm would "
                .. "read it there"
        end
        if string.find(text, key .. "=", at + 1, true) then
            return nil, key .. "= appears twice on the buffer line"
        end
        -- Slurm's value ends at the next space (not at a tab).
        return string.match(string.sub(text, at + #key + 1), "^[^ ]*")
    end
    local capacity, why = single_word("capacity")
    if not capacity then
        return why
    end
    local pool
    pool, why = single_word("pool")
    if not pool then
        return why
    end
    local bytes
    bytes, why = bbkit.parse_capacity(capacity)
    if not bytes then
        return "capacity=" .. capacity .. ": " .. why
    end
    if not pools then
        return nil
    end
    local p = pools[pool]
    if not p then
        local names = {}
        for name in pairs(pools) do
            names[#names + 1] = name
        end
        table.sort(names)
        return "unknown pool '" .. pool .. "' (pools: " .. table.concat(names, ", ") .. ")"
    end
    local total = bbkit.decimal_multiply(p.quantity, p.granularity)
    if bbkit.decimal_compare(bytes, total) > 0 then
        return "capacity=" .. capacity .. " can never be satisfied: pool " .. pool .. " holds "
            .. total .. " bytes in all"
    end
    return nil
end

-- The job id is only in the script's path: .../hash.N/job.<id>/script.
function bbkit.job_id_of_script(path)
    return string.match(path, "job%.(%d+)/script$")
end

local function pools_path()
    return BBKIT_STATE_DIR .. "/pools.json"
end

-- ---- the hooks -------------------------------------------------------------------------------

local function job_process(job_script)
    local script, why, whole = bbkit.read_script(job_script)
    if not script then
        return error_code(), "bbkit: cannot read the job script: " .. tostring(why)
    end
    if not whole then  -- bb-parse refuses it in one line, or reads it if the limit was raised
        local rc, message = call("bb-parse", { "--script", job_script })
        if rc ~= success_code() then
            return rc, message
        end
        return success_code()
    end
    local pools = bbkit.read_pools(pools_path())
    local problem = bbkit.check_request(script, BBKIT_DIRECTIVE, pools)
    if problem then
        local id = bbkit.job_id_of_script(job_script)
        log_error("bbkit: job %s refused: %s", tostring(id), problem)
        return error_code(), "bbkit: " .. problem
    end
    return success_code()
end

local function pools()
    local text, why = read_file(pools_path())
    if not text then
        log_error("bbkit: cannot read %s: %s", pools_path(), tostring(why))
        return error_code(), "bbkit: cannot read " .. pools_path() .. ": " .. tostring(why)
    end
    text = string.gsub(text, "%s+$", "")
    return success_code(), text
end

-- The job asked for no space (a bare #BB_LUA): Slurm passes pool "(null)" and size "0".
local function no_buffer(pool, size)
    return size == "0" or pool == "(null)" or pool == nil or pool == ""
end

-- Validates the whole request again, as the job's user, stage-in sources included (the client
-- side cli_filter can be bypassed), then reserves the space Slurm granted.
local function setup(job_id, uid, pool, size, job_script)
    local rc, message = call("bb-parse", { "--script", job_script, "--job-id", job_id,
        "--user", uid, "--check-sources" })
    if rc ~= success_code() or no_buffer(pool, size) then
        return rc, message
    end
    return call("bb-pool", { "alloc", "--job", job_id, "--user", uid, "--pool", pool,
        "--capacity", size, "--script", job_script })
end

-- Whether the job has a buffer, from Slurm's own view of its script (no capacity= line: a bare
-- #BB_LUA, nothing was reserved, and the buffer hooks have nothing to do). A script that cannot
-- be read counts as having one, so that the tool reports what is wrong.
function bbkit.asks_for_space(job_script)
    local script, _, whole = bbkit.read_script(job_script)
    if not script or not whole then
        return true
    end
    for _, line in ipairs(bbkit.directive_lines(script, BBKIT_DIRECTIVE)) do
        if string.find(line.text, "capacity=", 1, true) then
            return true
        end
    end
    return false
end

local function stage_call(sub, job_id, job_script)
    if not bbkit.asks_for_space(job_script) then
        return success_code()
    end
    return call("bb-stage", { "--job", job_id, sub })
end

local function state_of(job_id)
    local status, output, message = bbkit.run_tool("bb-stat", { "--json", "job", job_id })
    if status == 66 then
        return "none"
    end
    if status ~= 0 then
        return nil, message
    end
    -- The buffer's own state, not a phase's (bb-stat's JSON lists its phases too).
    local own = string.gsub(output, '"phases"%s*:%s*%b[]', "")
    return string.match(own, '"state"%s*:%s*"([^"]*)"'), output
end

-- 24.05+: data_in/data_out already ran the copy to its end (or answered a replay); whether the
-- stage is done is bb-stage's own verdict (--check: exit 0 done, 75 while another process, one
-- started before a slurmctld restart, still stages the buffer), never re-derived here.
local function test_stage(sub, job_id, job_script)
    if not bbkit.asks_for_space(job_script) then
        return success_code(), ""
    end
    local status, _, message = bbkit.run_tool("bb-stage", { "--job", job_id, sub, "--check" })
    if status == 0 then
        return success_code(), ""
    end
    if status == 75 then
        return success_code(), (slurm and slurm.SLURM_BB_BUSY) or "BUSY"
    end
    log_error("bbkit: %s", message)
    return error_code(), message
end

local function real_size(job_id)
    local state, output = state_of(job_id)
    if state == nil then
        return error_code(), output
    end
    if state == "none" then
        return success_code()
    end
    local allocated = string.match(output, '"allocated"%s*:%s*(%d+)')
    if not allocated then
        return success_code()
    end
    return success_code(), allocated
end

local function paths(job_id, job_script, path_file)
    -- The name the tools give this file (job_environment_path, ARCHITECTURE.md's
    -- job_environment): built here again, since this runs inside slurmctld and may not fork;
    -- tests/cli/slurm-scripts.bats checks the two agree.
    local env_file = BBKIT_STATE_DIR .. "/env/" .. BBKIT_CLUSTER .. "." .. job_id .. ".env"
    local text, why = read_file(env_file)
    if not text then
        if not bbkit.asks_for_space(job_script) then
            return success_code() -- no buffer (a bare #BB_LUA): nothing to add
        end
        log_error("bbkit: cannot read %s: %s", env_file, tostring(why))
        return error_code(), "bbkit: cannot read " .. env_file .. ": " .. tostring(why)
            .. " (SlurmUser must be in bbkit.toml's state_group, which may read env/)"
    end
    local out, open_why = io.open(path_file, "w")
    if not out then
        return error_code(), "bbkit: cannot write " .. path_file .. ": " .. tostring(open_why)
    end
    out:write(text)
    out:close()
    return success_code()
end

local function teardown(job_id, hurry)
    local args = { "--job", job_id }
    if hurry == "true" then
        args[#args + 1] = "--hurry"
    end
    -- 66: no buffer (none was asked for, or setup failed before one existed).
    return call("bb-teardown", args, { [66] = true })
end

bbkit.status_usage = "usage: scontrol show bbstat pools | burst | job JOBID\n"

-- Only these words reach bb-stat, each quoted; nothing a user types becomes an option.
function bbkit.status_args(words)
    if #words == 1 and (words[1] == "pools" or words[1] == "burst") then
        return { words[1] }
    end
    if #words == 2 and words[1] == "job" and string.match(words[2], "^%d+$")
        and #words[2] <= 19 then
        return { "job", words[2] }
    end
    return nil
end

-- uid: the caller of scontrol (Slurm 23.02 and later pass it; 22.05 does not): bb-stat then
-- shows what that user may see, so PrivateData holds for scontrol show bbstat too.
local function get_status(words, uid)
    local args = bbkit.status_args(words)
    if not args then
        return success_code(), bbkit.status_usage
    end
    if uid ~= nil then
        -- A uid that is not a plain number is refused, never dropped: dropping it would show
        -- everything, past PrivateData.
        if not string.match(tostring(uid), "^%d+$") or #tostring(uid) > 10 then
            return success_code(), "bbkit: refusing to show status for caller uid '"
                .. string.gsub(tostring(uid), "%c", "?") .. "': not a number"
        end
        args[#args + 1] = "--for-uid"
        args[#args + 1] = tostring(uid)
    end
    local status, output, message = bbkit.run_tool("bb-stat", args)
    if status ~= 0 then
        return success_code(), message .. "\n"
    end
    return success_code(), output
end

local function collect(...)
    local words = {}
    for i = 1, select("#", ...) do
        words[#words + 1] = tostring((select(i, ...)))
    end
    return words
end

-- ---- the signatures Slurm calls, fixed by SLURM_API ------------------------------------------

if SLURM_API ~= "22.05" and SLURM_API ~= "23.02" and SLURM_API ~= "24.05" then
    error("burst_buffer.lua: SLURM_API must be \"22.05\", \"23.02\" or \"24.05\", got '"
        .. tostring(SLURM_API) .. "' (rerun install-slurm --slurm-api)", 0)
end

-- The signatures the loading Slurm calls with, told by the `slurm` table it fills before it
-- runs the script (bbkit(7), "Use with Slurm"): SLURM_BB_BUSY from 24.05, job_info_to_string
-- in 23.02 to 24.05, neither in 22.05. nil without a table (the script loaded outside Slurm).
bbkit.slurm_releases = {
    ["22.05"] = "Slurm 22.05",
    ["23.02"] = "Slurm 23.02 or 23.11",
    ["24.05"] = "Slurm 24.05 or later",
}

function bbkit.slurm_api_of(t)
    if type(t) ~= "table" then
        return nil
    end
    if t.SLURM_BB_BUSY ~= nil then
        return "24.05"
    end
    if t.job_info_to_string ~= nil then
        return "23.02"
    end
    return "22.05"
end

-- Wrong signatures fail quietly, or worse: 23.02's on 22.05 would take the first two words
-- after `scontrol show bbstat` for the caller's uid and gid. Refuse to load instead.
local loading_api = bbkit.slurm_api_of(slurm)
if loading_api and loading_api ~= SLURM_API then
    local why = "bbkit: burst_buffer.lua has the " .. SLURM_API .. " hook signatures (SLURM_API) "
        .. "but is loaded by " .. bbkit.slurm_releases[loading_api] .. ", which calls the "
        .. loading_api .. " ones: rerun install-slurm --slurm-api " .. loading_api
    log_error("%s", why)
    error(why, 0)
end

-- 22.05 and 23.02+ pass the same leading arguments; 23.02+ appends uid, gid and job_info,
-- which bbkit does not need (the uid given to setup is the job's).
function slurm_bb_job_process(job_script)
    return job_process(job_script)
end

function slurm_bb_pools()
    return pools()
end

-- The hooks take Slurm's arguments, whether used or not (the tools take the user's groups).
function slurm_bb_job_teardown(job_id, job_script, hurry) -- luacheck: no unused args
    return teardown(job_id, hurry)
end

function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script) -- luacheck: no unused args
    return setup(job_id, uid, pool, bb_size, job_script)
end

function slurm_bb_data_in(job_id, job_script)
    return stage_call("in", job_id, job_script)
end

function slurm_bb_real_size(job_id)
    return real_size(job_id)
end

function slurm_bb_paths(job_id, job_script, path_file)
    return paths(job_id, job_script, path_file)
end

function slurm_bb_pre_run(job_id, job_script)
    return stage_call("pre-run", job_id, job_script)
end

function slurm_bb_post_run(job_id, job_script)
    return stage_call("post-run", job_id, job_script)
end

function slurm_bb_data_out(job_id, job_script)
    return stage_call("out", job_id, job_script)
end

if SLURM_API == "22.05" then
    function slurm_bb_get_status(...)
        return get_status(collect(...))
    end
else
    -- Slurm's arguments: gid unused (bb-stat decides from the uid).
    function slurm_bb_get_status(uid, gid, ...) -- luacheck: no unused args
        return get_status(collect(...), uid)
    end
end

if SLURM_API == "24.05" then
    function slurm_bb_test_data_in(job_id, job_script)
        return test_stage("in", job_id, job_script)
    end

    function slurm_bb_test_data_out(job_id, job_script)
        return test_stage("out", job_id, job_script)
    end
end
