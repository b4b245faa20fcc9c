-- bbkit's job_submit.lua (install-slurm --node-local rewrites this file while this line is first)
--[[
The job_submit.lua Slurm's job_submit/lua plugin (JobSubmitPlugins=lua) loads from slurm.conf's
directory, written by install-slurm --node-local when that directory had none: every job and
every change to a job passes bbkit's check for node-local pools (bbkit(7), NODE-LOCAL POOLS),
bbkit_job_submit.lua beside it. A site with a job_submit.lua of its own calls the same two
functions from it, as here.
]]

-- ---- install-time settings (install-slurm writes them; keep each on one line) ----------------
BBKIT_JOB_SUBMIT = ""            -- bbkit_job_submit.lua's absolute name
-- ---- end of install-time settings ---------------------------------------------------------

dofile(BBKIT_JOB_SUBMIT)

-- The hooks take Slurm's arguments, whether used or not.
function slurm_job_submit(job_desc, part_list, submit_uid)
    return bbkit_job_submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return bbkit_job_modify(job_desc, job_rec, part_list, modify_uid)
end
