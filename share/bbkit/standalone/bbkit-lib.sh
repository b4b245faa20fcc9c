# shellcheck shell=sh
# bbkit-lib.sh: the shell the scheduler adapters share (bbkit(7), STANDALONE MODE; USE WITH
# SLURM (DATAWARP PLUGIN); SPUR): bbkit-job, the scripts under pbs/, gridengine/, slurm/,
# slurm-node/ and spur/, and ../datawarp/dw_wlm_cli and dwstat. Each rule they have in common
# is written here once; what a tool decides stays the tool's.
#
# Sourced, never run (no shebang, not executable). These scripts run as root, or as SlurmUser
# through sudo, so an adapter sources this file only by a path made from its own resolved
# location, never from an environment variable, PATH or the working directory. It fixes PATH
# before anything runs, and calls bbkit_start once it has this file:
#     set -eu
#     PATH=/usr/sbin:/usr/bin:/sbin:/bin
#     here=$(dirname "$(readlink -f "$0")")
#     # shellcheck source=../bbkit-lib.sh
#     . "$here/../bbkit-lib.sh"
#     bbkit_start "$here" bbkit-SCHEDULER-SCRIPT
# (from a scheduler directory such as pbs/; dw_wlm_cli and dwstat source
# "${self%/*}/../standalone/bbkit-lib.sh", bbkit-job "$here/bbkit-lib.sh"). An adapter whose
# scheduler must see one failure status sets "trap 'exit STATUS' EXIT" before the "." line, so
# that even a missing library ends in it; bbkit_exit_only then takes over. It is installed
# beside bbkit-job, owned by root and not writable by others, like the scripts. Those lines are
# all a script repeats of another: scripts/check-shell-repeats, run by scripts/lint-scripts,
# fails on any run of six lines standing twice among them.
#
# Every name defined here starts with bbkit_; sourcing it only sets the variables below.

# The PATH every adapter gives bbkit-job (whose environment it empties first).
bbkit_path=/usr/sbin:/usr/bin:/sbin:/bin
# The state the functions below read, set here: some adapters run as root in an environment a
# job's user chose (Grid Engine's), where a bbkit_job_bindir or bbkit_uid of theirs must not
# count. The adapter sets what it needs after sourcing this file.
bbkit_me=bbkit
bbkit_fail_status=1
bbkit_say_also=
bbkit_job_config=
bbkit_job_bindir=
bbkit_job=
bbkit_tools=
bbkit_uid=

# --- Start -----------------------------------------------------------------------------------

# bbkit_start DIR [NAME]: what every script that sources this file does first, DIR being its
# own resolved directory (PREFIX/share/bbkit/standalone/SCHEDULER, or PREFIX/share/bbkit/
# datawarp): IFS the shell's default (space, tab, newline: a scheduler may pass its own, or a
# user's), PATH (set by the script before anything ran) exported to what it runs, messages
# under NAME ($bbkit_me, for bbkit_fail), $bbkit_job the bbkit-job an adapter under
# standalone/ runs (DIR/../bbkit-job), and the tools found (bbkit_find_tools). Starts no
# process (but readlink for $BBKIT_BINDIR): Slurm forks dw_wlm_cli for every call.
bbkit_start() {
    IFS=' 	
'
    export PATH
    bbkit_me=${2:-bbkit}
    # shellcheck disable=SC2034 # read by the adapters that source this file
    bbkit_job=$1/../bbkit-job
    bbkit_find_tools "$1"
}

# bbkit_spur_hook: what each of Spur's hooks sets first, after bbkit_start: the C locale (its
# checks of printable ASCII and of units), a umask that lets no one else read what it writes,
# and / as its working directory (spurctld starts a prolog or epilog in the job's, which the
# user chose).
bbkit_spur_hook() {
    LC_ALL=C
    export LC_ALL
    umask 077
    cd /
}

# --- Messages --------------------------------------------------------------------------------

# bbkit_printable TEXT: TEXT with every byte that is not printable (a newline, an escape) as '?':
# a job id, a user name or a path a user chose never breaks a message's one line.
bbkit_printable() {
    printf '%s' "$1" | tr -c '[:print:]' '?'
}

# bbkit_blank TEXT: TEXT as one line, its control characters (a newline) blanked; other bytes,
# UTF-8 included, kept (Slurm's adapters, bbkit-job).
bbkit_blank() {
    printf '%s' "$1" | tr '\000-\037\177' ' '
}

# bbkit_comment TEXT: bbkit_blank, at most 480 bytes: a job's AdminComment or a syslog line.
bbkit_comment() {
    bbkit_blank "$1" | head -c 480
}

# bbkit_say MESSAGE: MESSAGE as one printable line on standard error and, when $bbkit_say_also
# names a file, appended to it too (Grid Engine's shepherd error file: bbkit_ge_error_file).
bbkit_say() {
    set -- "$(bbkit_printable "$1")"
    printf '%s\n' "$1" >&2
    if [ -n "$bbkit_say_also" ]; then
        printf '%s\n' "$1" >>"$bbkit_say_also" || :
    fi
}

# bbkit_fail MESSAGE: "$bbkit_me: MESSAGE" through bbkit_say, then exit $bbkit_fail_status (the
# status the scheduler reads as "this job failed": 1 for PBS, 100 for Grid Engine).
bbkit_fail() {
    bbkit_say "$bbkit_me: $1"
    exit "$bbkit_fail_status"
}

# bbkit_reason OUTPUT: bbkit-job's standard error, all but its last line passed on to standard
# error; the last line (the failing tool's one-line message, "bb-TOOL: ...") printed on
# standard output for the caller to place where the scheduler shows a reason.
bbkit_reason() {
    [ -n "$1" ] || return 0
    printf '%s\n' "$1" | sed '$d' >&2
    printf '%s\n' "$1" | tail -n 1
}

# --- Exit statuses ---------------------------------------------------------------------------

# bbkit_exit_only FALLBACK STATUS...: whatever ends the script (set -e, a failing command, an
# exit anywhere), the scheduler sees one of STATUS..., else FALLBACK: a scheduler reads some
# statuses as more than the job's failure (Grid Engine puts the queue in error state, PBS
# requeues a checkpointed job on 2). FALLBACK is bbkit_fail's status too.
bbkit_exit_only() {
    bbkit_exit_fallback=$1
    bbkit_fail_status=$1
    shift
    bbkit_exit_statuses=' '
    for bbkit_exit; do
        bbkit_exit_statuses="$bbkit_exit_statuses$bbkit_exit "
    done
    trap 'bbkit_exit=$?
        case $bbkit_exit_statuses in
            *" $bbkit_exit "*) ;;
            *) exit "$bbkit_exit_fallback" ;;
        esac' EXIT
}

# --- Job ids ---------------------------------------------------------------------------------

# bbkit_job_id SEQ [INDEX]: bbkit's job id, in $bbkit_id, for the scheduler's job number SEQ or,
# with INDEX, for the task INDEX of its array job SEQ: (INDEX + 1) * 10^12 + SEQ, unique because
# the schedulers' job numbers stay below 10^12 (PBS's max_job_sequence_id, Grid Engine's job
# ids). Returns 0, else what is wrong: 1 SEQ is not a job number (decimal digits, no leading
# zero), 2 SEQ is 10^12 or more, 3 INDEX is not an index (decimal, no leading zero but 0), 4
# INDEX is too large for a 64-bit job id.
bbkit_job_id() {
    case $1 in
        '' | *[!0-9]* | 0*) return 1 ;;
    esac
    [ ${#1} -le 12 ] || return 2
    if [ $# -lt 2 ]; then
        bbkit_id=$1
        return 0
    fi
    case $2 in
        '' | *[!0-9]* | 0?*) return 3 ;;
    esac
    { [ ${#2} -le 7 ] && [ "$2" -lt 9223371 ]; } || return 4
    # shellcheck disable=SC2034 # the result, read by the adapters that source this file
    bbkit_id=$((($2 + 1) * 1000000000000 + $1))
}

# bbkit_pbs_job_id PBSID: bbkit's job id for PBS's SEQ.SERVER or SEQ[INDEX].SERVER, in $bbkit_id
# (bbkit_job_id), or bbkit_fail. The server name may hold letters, digits, '.', '-' and '_'
# only (it becomes part of the job script's file name).
bbkit_pbs_job_id() {
    bbkit_pbs_seq=${1%%[.[]*}
    bbkit_pbs_rest=${1#"$bbkit_pbs_seq"}
    set -- "$1"
    case $bbkit_pbs_rest in
        '['*)
            bbkit_pbs_index=${bbkit_pbs_rest#[}
            bbkit_pbs_index=${bbkit_pbs_index%%]*}
            bbkit_pbs_rest=${bbkit_pbs_rest#"[$bbkit_pbs_index]"}
            set -- "$1" "$bbkit_pbs_index"
            ;;
    esac
    bbkit_pbs_status=0
    bbkit_job_id "$bbkit_pbs_seq" ${2+"$2"} || bbkit_pbs_status=$?
    [ "$bbkit_pbs_status" -ne 1 ] ||
        bbkit_fail "invalid job id '$1' (expected SEQ.SERVER or SEQ[INDEX].SERVER)"
    case $bbkit_pbs_rest in
        '' | .?*) ;;
        *) bbkit_fail "invalid job id '$1' (expected SEQ.SERVER or SEQ[INDEX].SERVER)" ;;
    esac
    case ${bbkit_pbs_rest#.} in
        *[!A-Za-z0-9._-]* | .*) bbkit_fail "invalid job id '$1' (bad server name)" ;;
    esac
    case $bbkit_pbs_status in
        2) bbkit_fail "job id '$1' is too large for bbkit's job ids" ;;
        3) bbkit_fail "invalid job id '$1' (expected SEQ[INDEX].SERVER)" ;;
        4) bbkit_fail "subjob index of '$1' is too large for bbkit's job ids" ;;
    esac
}

# bbkit_ge_job_id: bbkit's job id for Grid Engine's JOB_ID and SGE_TASK_ID ("undefined" for a
# plain job), in $bbkit_id (bbkit_job_id), or bbkit_fail; the job number in $bbkit_ge_job.
bbkit_ge_job_id() {
    bbkit_ge_job=${JOB_ID:-}
    set -- "${SGE_TASK_ID:-undefined}"
    [ "$1" != undefined ] || set --
    bbkit_ge_status=0
    bbkit_job_id "$bbkit_ge_job" "$@" || bbkit_ge_status=$?
    case $bbkit_ge_status in
        1) bbkit_fail "invalid JOB_ID '$bbkit_ge_job' (expected a job number from Grid Engine)" ;;
        2) bbkit_fail "JOB_ID '$bbkit_ge_job' is too large for bbkit's job ids" ;;
        3) bbkit_fail "invalid SGE_TASK_ID '$1' for job $bbkit_ge_job" ;;
        4) bbkit_fail "array task $1 of job $bbkit_ge_job is too large for bbkit's job ids" ;;
    esac
}

# bbkit_ge_job LINE ARGS...: what both Grid Engine scripts read first, in this order: the
# shepherd's error file, where every later message goes too (bbkit_ge_error_file); ARGS, what
# the admin wrote on the queue's LINE (bbkit_ge_args); the job id (bbkit_ge_job_id).
bbkit_ge_job() {
    bbkit_ge_error_file
    bbkit_ge_args "$@"
    bbkit_ge_job_id
}

# bbkit_u32 VALUE: whether VALUE is a u32 in decimal (no leading zero but 0 itself, at most
# 4294967295), as Spur's job ids and uids are; returns 1 when it is no number, 2 when too large.
bbkit_u32() {
    case $1 in
        '' | *[!0-9]* | 0?*) return 1 ;;
    esac
    { [ ${#1} -le 10 ] && [ "$1" -le 4294967295 ]; } || return 2
}

# bbkit_spur_job_id HOOK: bbkit's job id, in $bbkit_id, for the job spurctld runs its hook HOOK
# (prolog_slurmctld, epilog_slurmctld) for: SPUR_JOB_ID, 1 to 4294967295 (bbkit_u32); else
# bbkit_fail, and so too when SPUR_SCRIPT_CONTEXT names another hook (the script installed in
# the wrong place).
bbkit_spur_job_id() {
    case ${SPUR_SCRIPT_CONTEXT:-$1} in
        "$1") ;;
        *) bbkit_fail "run as Spur's '${SPUR_SCRIPT_CONTEXT}' hook: install it as $1" ;;
    esac
    bbkit_id=${SPUR_JOB_ID:-}
    bbkit_spur_status=0
    bbkit_u32 "$bbkit_id" || bbkit_spur_status=$?
    case $bbkit_spur_status:$bbkit_id in
        1:* | 0:0) bbkit_fail "invalid job id '$bbkit_id' in SPUR_JOB_ID (run this as Spur's $1)" ;;
        2:*) bbkit_fail "invalid job id '$bbkit_id' in SPUR_JOB_ID" ;;
    esac
}

# --- The job as the scheduler gives it -------------------------------------------------------

# bbkit_job_user JOB NOUN USER: USER (the job's owner, NOUN in messages) is a user name this
# host knows, else bbkit_fail.
bbkit_job_user() {
    case $3 in
        '' | -*) bbkit_fail "job $1: invalid $2 '$3'" ;;
    esac
    id -u -- "$3" >/dev/null 2>&1 || bbkit_fail "job $1: $2 '$3' does not exist on this host"
}

# bbkit_job_script JOB SCRIPT: the job's spooled script is a regular file, not a symbolic link,
# else bbkit_fail (bbkit-job reads it as root).
bbkit_job_script() {
    if [ -L "$2" ] || [ ! -f "$2" ]; then
        bbkit_fail "job $1: job script '$2' is not a regular file (a symbolic link or missing)"
    fi
}

# bbkit_ge_args LINE ARGS...: what the admin wrote after the script on the queue's LINE (prolog
# or epilog): --config FILE, which becomes bbkit-job's configuration ($bbkit_job_config);
# anything else is bbkit_fail.
bbkit_ge_args() {
    bbkit_ge_line=$1
    shift
    while [ $# -gt 0 ]; do
        case $1 in
            --config)
                [ $# -ge 2 ] || bbkit_fail "--config needs a file (fix the queue's $bbkit_ge_line line)"
                bbkit_job_config=$2
                shift 2
                ;;
            *) bbkit_fail "unknown argument '$1' (fix the queue's $bbkit_ge_line line)" ;;
        esac
    done
}

# bbkit_ge_error_file: $bbkit_say_also becomes Grid Engine's shepherd error file (qstat -j's
# "error reason"), $SGE_JOB_SPOOL_DIR/error, when it is the execd's own: a directory and a
# regular file, neither a link, the directory not the job owner's.
bbkit_ge_error_file() {
    bbkit_say_also=
    set -- "${SGE_JOB_SPOOL_DIR:-}"
    if [ -n "$1" ] && [ -d "$1" ] && [ ! -L "$1" ] && [ -f "$1/error" ] &&
        [ ! -L "$1/error" ] && [ "$(stat -c %U -- "$1")" != "${USER:-}" ]; then
        bbkit_say_also=$1/error
    fi
}

# --- bbkit-job -------------------------------------------------------------------------------

# bbkit_job_run BBKIT_JOB COMMAND ARGS...: bbkit-job (by the path the adapter made from its own
# location) with an empty environment but PATH=$bbkit_path, and BBKIT_CONFIG and BBKIT_BINDIR
# when $bbkit_job_config and $bbkit_job_bindir are set (from what the admin wrote, never from a
# job's environment). Its standard output is dropped, its standard error printed on standard
# output (for $(...)); returns its exit status.
bbkit_job_run() {
    # shellcheck disable=SC2069 # on purpose: standard error to the caller's $(...), output dropped
    env -i PATH="$bbkit_path" ${bbkit_job_config:+BBKIT_CONFIG="$bbkit_job_config"} \
        ${bbkit_job_bindir:+BBKIT_BINDIR="$bbkit_job_bindir"} "$@" 2>&1 >/dev/null
}

# bbkit_job_settings_inherited: $BBKIT_CONFIG and $BBKIT_BINDIR of this script's environment
# become bbkit-job's (bbkit_job_run), for a scheduler whose environment is root's (pbs_mom's,
# spurctld's): the admin's, never a job's.
bbkit_job_settings_inherited() {
    bbkit_job_config=${BBKIT_CONFIG:-}
    bbkit_job_bindir=${BBKIT_BINDIR:-}
}

# --- Slurm ------------------------------------------------------------------------------------

# bbkit_admin_comment JOB MESSAGE: the job's AdminComment becomes "bbkit: MESSAGE" (bbkit_comment),
# where scontrol show job shows why bbkit failed it: an admin's field, which SlurmUser and root
# may set and the job's user may not change. Fails, silently, when Slurm refuses (a finished job
# takes no update: "Job has already finished").
bbkit_admin_comment() {
    scontrol update "JobId=$1" "AdminComment=bbkit: $(bbkit_comment "$2")" >/dev/null 2>&1
}

# bbkit_job_failure FILE COMMAND STATUS: why `bbkit-job COMMAND` failed: the last line of its
# standard error, kept in FILE (the failing tool's one-line message), else its exit status.
bbkit_job_failure() {
    set -- "$(tail -n 1 "$1")" "$2" "$3"
    printf '%s\n' "${1:-bbkit-job $2 failed with exit status $3}"
}

# bbkit_node_health BBKIT_JOB DIR: whether this node is healthy, by `bbkit-job health` (bb-pool
# health of the node-local pools; bbkit(7), NODE-LOCAL POOLS, Node health) with the node
# scripts prolog and epilog in DIR trusted too; when not, its exit status (69 a fault, 77 or 78
# the state directory or configuration, 127 a tool missing) and the last line it wrote, on
# standard output. The node scripts blame the node for a failure only through this, never by
# the failure's exit status.
bbkit_node_health() {
    bbkit_health_status=0
    bbkit_health_out=$("$1" health --trust "$2/prolog" --trust "$2/epilog" 2>&1 >/dev/null) ||
        bbkit_health_status=$?
    [ "$bbkit_health_status" -ne 0 ] || return 0
    bbkit_comment "$(printf '%s\n' "${bbkit_health_out:-bbkit-job health failed}" | tail -n 1)"
    return "$bbkit_health_status"
}

# bbkit_gres_sync NODE [ENDING_JOB]: makes Slurm's count of NODE's node-local pools' GRES what
# is really free there (bbkit(7), NODE-LOCAL POOLS, Counts agree): `bb-stat gres` with the
# jobs Slurm has on NODE holding their GRES (running, configuring, suspended, stopped,
# signaling, resizing: Slurm releases a job's GRES when it starts completing; ENDING_JOB, whose
# Epilog calls this, never) and the node's Gres= prints the Gres= that fixes Slurm's count,
# and `scontrol update` sets it; nothing when they agree. The node's Gres= is read again just
# before the update, which is skipped when it changed meanwhile (an administrator's update
# wins; the next run looks again). One at a time on a node (a flock on /run/bbkit-gres.lock):
# two at once could set an older count last. Each Slurm command gets 20 s, the lock 10 s: a
# Prolog or Epilog never waits long for this. Needs the tools found (bbkit_find_tools). Fails
# with a line on standard error when Slurm or bb-stat does; callers log that and go on.
bbkit_gres_sync() {
    command -v flock >/dev/null || { echo "bbkit: flock (util-linux) is missing: Slurm's GRES count not updated" >&2; return 69; }
    (
        flock -w 10 9 || { echo "bbkit: $1: another GRES count update holds /run/bbkit-gres.lock" >&2; exit 75; }
        bbkit_sync_err=$(mktemp "${TMPDIR:-/tmp}/bbkit-gres.XXXXXX") || exit 73
        trap 'rm -f "$bbkit_sync_err"' EXIT
        jobs=$(timeout 20 squeue -h -w "$1" -t all -o '%A %T' 2>"$bbkit_sync_err") || {
            echo "bbkit: squeue -w $1: $(bbkit_comment "$(tail -n 1 "$bbkit_sync_err")")" >&2
            exit 69
        }
        jobs=$(printf '%s\n' "$jobs" | awk -v ending="${2:-}" '
            $1 == ending { next }
            $2 ~ /^(RUNNING|CONFIGURING|SUSPENDED|STOPPED|SIGNALING|RESIZING)$/ { print $1 }' |
            sort -u | paste -s -d, -)
        have=$(bbkit_node_gres "$1" "$bbkit_sync_err") || exit 69
        want=$("$(bbkit_tool bb-stat)" gres --slurm-jobs "$jobs" --slurm-node-gres "$have" --slurm-update) ||
            exit $?
        [ -n "$want" ] || exit 0
        again=$(bbkit_node_gres "$1" "$bbkit_sync_err") || exit 69
        if [ "$again" != "$have" ]; then
            echo "bbkit: node $1: its Gres= changed from $have to $again meanwhile: not updated" >&2
            exit 75
        fi
        timeout 20 scontrol update "NodeName=$1" "Gres=$want" >/dev/null 2>"$bbkit_sync_err" || {
            echo "bbkit: scontrol update NodeName=$1 Gres=$want: $(bbkit_comment "$(tail -n 1 "$bbkit_sync_err")")" >&2
            exit 69
        }
        logger -t bbkit-gres -p daemon.notice "node $1: Slurm's GRES set to $want (was $have)" 2>/dev/null || true
    ) 9>>/run/bbkit-gres.lock
}

# bbkit_node_gres NODE ERRFILE: NODE's Gres= as `scontrol -o show node` prints it: the first
# field named so (an administrator's Reason or Comment later on the line may hold the words
# too), "" when it has none. Fails with a line on standard error (scontrol's in ERRFILE).
bbkit_node_gres() {
    bbkit_node_line=$(timeout 20 scontrol -o show node "$1" 2>"$2") || {
        echo "bbkit: scontrol show node $1: $(bbkit_comment "$(tail -n 1 "$2")")" >&2
        return 69
    }
    printf '%s\n' "$bbkit_node_line" | tr ' ' '\n' | sed -n 's/^Gres=//p' | head -n 1
}

# --- Controller failover ---------------------------------------------------------------------

# bbkit_controller_role on|off: SlurmctldPrimaryOnProg and SlurmctldPrimaryOffProg (slurm/primary-on
# and slurm/primary-off; bbkit(7), STATE DIRECTORY, "Controller failover"). "on": this controller
# became Slurm's primary (at every start as such, and at a takeover), so it takes bbkit's state
# directory over (bb-pool takeover): from then on no process on another controller writes it.
# "off": it left that role, so it forgets its claim (bb-pool takeover --release). Slurm runs the
# program as SlurmUser, without arguments and with every file descriptor closed: the outcome goes
# to syslog (tag bbkit-controller), the status to slurmctld's log.
bbkit_controller_role() {
    case $1 in
        on) set -- ;;
        off) set -- --release ;;
        *) return 64 ;;
    esac
    bbkit_role_status=0
    bbkit_role_out=$(bbkit_as_root bb-pool takeover "$@" 2>&1) || bbkit_role_status=$?
    logger -t bbkit-controller -p "daemon.$([ "$bbkit_role_status" -eq 0 ] && echo notice || echo err)" \
        -- "$(bbkit_comment "$bbkit_role_out")" 2>/dev/null || true
    return "$bbkit_role_status"
}

# --- The tools -------------------------------------------------------------------------------

# bbkit_find_tools DIR: where bbkit_tool finds the tools: $BBKIT_BINDIR, else PREFIX/bin of the
# installation the caller belongs to (DIR, its own directory, is below PREFIX/share/bbkit/),
# else PATH; a directory is used only when it holds bb-stage. No process but readlink for
# $BBKIT_BINDIR: Slurm forks dw_wlm_cli for every call.
bbkit_find_tools() {
    bbkit_tools=${BBKIT_BINDIR:-${1%/share/bbkit/*}/bin}
    if [ -x "$bbkit_tools/bb-stage" ]; then
        [ -z "${BBKIT_BINDIR:-}" ] || bbkit_tools=$(readlink -f "$bbkit_tools")
    else
        bbkit_tools=
    fi
}

# bbkit_tool NAME: the absolute path of the tool NAME (bbkit_find_tools), or NAME when PATH does
# not have it (the shell then says "not found", exit 127).
bbkit_tool() {
    if [ -n "$bbkit_tools" ]; then
        echo "$bbkit_tools/$1"
    else
        command -v "$1" || echo "$1"
    fi
}

# bbkit_as_root NAME ARGS...: the root tool NAME, directly as root, else through "sudo -n" and
# the sudoers drop-in, which names the tools by absolute path (bbkit(7), SECURITY).
bbkit_as_root() {
    : "${bbkit_uid:=$(id -u)}"
    bbkit_as_root_tool=$(bbkit_tool "$1")
    shift
    if [ "$bbkit_uid" -eq 0 ]; then
        "$bbkit_as_root_tool" "$@"
    else
        sudo -n "$bbkit_as_root_tool" "$@"
    fi
}
