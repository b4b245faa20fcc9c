--[[
bbkit's submit rules: what cli_filter.lua (in sbatch, salloc and srun, as the user) and
bbkit_job_submit.lua (in slurmctld, through job_submit/lua) read of a job the same way, written
once (ARCHITECTURE.md, share/bbkit/slurm/): which scripts hold directives, how bb-parse is run
and its answer read, and the GRES a job names.

Slurm never loads this file. install-slurm writes its text into each installed script in place
of the line that loads it here from beside the sources (a client host may hold cli_filter.lua
alone, or get it from slurmctld in configless mode): each installed script stands alone. The
functions read the install-time settings of the script they are part of (BBKIT_BINDIR,
BBKIT_CONFIG, BBKIT_DIRECTIVE, BBKIT_PLUGIN, BBKIT_DIRECTIVES).
]]

-- A word quoted for sh: nothing in it is read by the shell.
function bbkit_quote(word)
    return "'" .. string.gsub(word, "'", "'\\''") .. "'"
end

-- Whether a job's option or field holds a value (Slurm's cli_filter says "unset" for none).
function bbkit_set(value)
    return value ~= nil and value ~= "" and value ~= "unset"
end

-- The directive lines of a script as Slurm's burst_buffer/datawarp plugin collects them
-- (bbkit(7), REQUESTS): up to the first line not starting with '#', every line starting with
-- "#DW" or "#BB" (no blank needed after them), a trailing '\' joining the next such line without
-- its prefix (and without its leading blanks only when a blank came right before the '\').
-- Returns the list of lines, or nil and a message for a #DW line continued on a #BB line (or
-- the reverse), which Slurm refuses. Slurm's datawarp plugin checks persistent-only jobs
-- (#BB create_persistent, destroy_persistent) nowhere at submit: this reading decides which
-- scripts bb-parse checks there.
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

-- Whether a batch script holds a directive line in its leading comment block: one of
-- BBKIT_DIRECTIVE's, and in standalone mode one of any of BBKIT_DIRECTIVES (bbkit-job reads
-- them all). A cheap look, no process: a script it finds none in costs nothing more.
function bbkit_has_directive(script)
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

-- Runs `bb-parse [--config BBKIT_CONFIG] ARGS... --json SHELL_TAIL` with no standard input;
-- every word of ARGS is quoted, SHELL_TAIL is shell text of the caller's own (or nil).
-- Returns bb-parse's exit status as a string (nil when it could not be started or its answer
-- not read), its standard output (the JSON), and, when the status is not "0", its message: the
-- last line of its standard error, starting "bb-parse: " (Slurm shows one line; an earlier line
-- never counts, see burst_buffer.lua).
function bbkit_run_bb_parse(args, shell_tail)
    local words = { bbkit_quote(BBKIT_BINDIR ~= "" and (BBKIT_BINDIR .. "/bb-parse") or "bb-parse") }
    if BBKIT_CONFIG ~= "" then
        words[#words + 1] = "--config " .. bbkit_quote(BBKIT_CONFIG)
    end
    for _, arg in ipairs(args) do
        words[#words + 1] = bbkit_quote(arg)
    end
    words[#words + 1] = "--json"
    words[#words + 1] = shell_tail
    -- Standard output (the JSON) first, then the exit status, then standard error: a JSON line
    -- never starts with "bbkit-exit=", so the first such line ends the JSON whatever the
    -- messages say.
    local line = "{ bbkit_err=$(" .. table.concat(words, " ")
        .. " </dev/null 2>&1 >&3 3>&-); printf '\\nbbkit-exit=%s\\n%s\\n' \"$?\" \"$bbkit_err\"; } 3>&1"
    local handle = io.popen(line, "r")
    if not handle then
        return nil, nil, "bb-parse: could not be started"
    end
    local output = handle:read("*a") or ""
    handle:close()
    local json, status, body = string.match(output, "^(.-)\nbbkit%-exit=(%d+)\n(.*)$")
    if status == "0" then
        return status, json
    end
    local message
    for text in string.gmatch(body or output, "[^\n]+") do
        message = text
    end
    if message and not string.match(message, "^bb%-parse: ") then
        message = "bb-parse: " .. message
    end
    message = message or ("bb-parse: failed with exit status " .. tostring(status)
        .. " (is bbkit installed on this host?)")
    return status, json, message
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
        return nil, nil, "bbkit: bb-parse --json names its gres in a shape bbkit's Slurm scripts "
            .. "do not read (rerun install-slurm after upgrading bbkit)"
    end
    return name, count
end

-- The items of a GRES value, each without Slurm's prefix. Slurm keeps each item as given,
-- prefixed with "gres:" (22.05 to 23.02) or "gres/" (23.11 and later):
-- [gres:|gres/]NAME[:TYPE][:COUNT], comma-separated; "none" asks for none.
function bbkit_gres_items(value)
    local items = {}
    if not bbkit_set(value) or string.lower(value) == "none" then
        return items
    end
    for item in string.gmatch(value, "[^,]+") do
        local rest = string.match(item, "^gres[:/](.+)$")
        while rest do
            item = rest
            rest = string.match(item, "^gres[:/](.+)$")
        end
        items[#items + 1] = item
    end
    return items
end

-- The names of the GRES a value asks for (bbkit_gres_items), as given.
function bbkit_gres_names(value)
    local names = {}
    for _, item in ipairs(bbkit_gres_items(value)) do
        names[#names + 1] = string.match(item, "^[^:]*")
    end
    return names
end
