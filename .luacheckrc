-- luacheck's configuration for share/bbkit/slurm/*.lua (scripts/lint-shell runs it).
-- Slurm's lua plugins link Lua 5.1, 5.3 or 5.4 (whichever its configure found): only what all
-- of them have.
std = "min"
-- Slurm's plugins (burst_buffer/lua, cli_filter/lua) give the scripts the `slurm` table
-- (slurm.SUCCESS, slurm.ERROR, slurm.log_info, ...) before they load them.
read_globals = { "slurm" }
-- The install-time settings: install-slurm rewrites each as one line, its note included.
max_line_length = false

-- What submit_rules.lua defines: cli_filter.lua and bbkit_job_submit.lua hold its text once
-- installed, and load it from beside them in the sources.
local submit_rules = {
    "bbkit_quote", "bbkit_set", "bbkit_datawarp_lines", "bbkit_has_directive",
    "bbkit_run_bb_parse", "bbkit_json_gres", "bbkit_gres_items", "bbkit_gres_names",
}

files["share/bbkit/slurm/burst_buffer.lua"] = {
    globals = {
        -- The install-time settings (install-slurm writes them; bbkit(7), USE WITH SLURM).
        "BBKIT_BINDIR", "BBKIT_CONFIG", "BBKIT_STATE_DIR", "BBKIT_CLUSTER", "BBKIT_DIRECTIVE",
        "SLURM_API", "BBKIT_SUDO",
        -- The rules, a table the tests load the script for (tests/slurm-lua).
        "bbkit",
        -- The hooks Slurm's burst_buffer/lua plugin calls by name.
        "slurm_bb_job_process", "slurm_bb_pools", "slurm_bb_job_teardown", "slurm_bb_setup",
        "slurm_bb_data_in", "slurm_bb_test_data_in", "slurm_bb_real_size", "slurm_bb_paths",
        "slurm_bb_pre_run", "slurm_bb_post_run", "slurm_bb_data_out", "slurm_bb_test_data_out",
        "slurm_bb_get_status",
    },
}

files["share/bbkit/slurm/cli_filter.lua"] = {
    globals = {
        -- The install-time settings (install-slurm writes them).
        "BBKIT_BINDIR", "BBKIT_CONFIG", "BBKIT_DIRECTIVE", "BBKIT_PLUGIN", "BBKIT_DIRECTIVES",
        "BBKIT_NODE_GRES",
        -- The hooks Slurm's cli_filter/lua plugin calls by name.
        "slurm_cli_setup_defaults", "slurm_cli_pre_submit", "slurm_cli_post_submit",
        -- A function the tests call (tests/cli/slurm-scripts.bats).
        "bbkit_cli_add_gres",
    },
    read_globals = submit_rules,
}

files["share/bbkit/slurm/bbkit_job_submit.lua"] = {
    globals = {
        -- The install-time settings (install-slurm writes them).
        "BBKIT_BINDIR", "BBKIT_CONFIG", "BBKIT_DIRECTIVE", "BBKIT_PLUGIN", "BBKIT_DIRECTIVES",
        "BBKIT_NODE_GRES", "BBKIT_SLURM_UID",
        -- What job_submit.lua, bbkit's or a site's, calls.
        "bbkit_job_submit", "bbkit_job_modify",
    },
    read_globals = submit_rules,
}

files["share/bbkit/slurm/job_submit.lua"] = {
    globals = {
        -- The install-time setting (install-slurm writes it).
        "BBKIT_JOB_SUBMIT",
        -- The hooks Slurm's job_submit/lua plugin calls by name.
        "slurm_job_submit", "slurm_job_modify",
    },
    -- What bbkit_job_submit.lua defines.
    read_globals = { "bbkit_job_submit", "bbkit_job_modify" },
}

files["share/bbkit/slurm/submit_rules.lua"] = {
    -- The functions it defines (tests/cli/slurm-scripts.bats and tests/slurm-lua call them too).
    globals = submit_rules,
    -- The install-time settings of the script it is written into.
    read_globals = { "BBKIT_BINDIR", "BBKIT_CONFIG", "BBKIT_DIRECTIVE", "BBKIT_PLUGIN",
                     "BBKIT_DIRECTIVES" },
}
