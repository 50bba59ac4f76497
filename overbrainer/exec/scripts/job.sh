# overbrainer job wrapper: POSIX sh, the same under sh, dash and busybox sh.
#
#   sh job.sh run    The job itself. Runs in the run directory as the leader of its own
#                    session and process group (started through setsid). Records its pid in
#                    job.pid, runs ./job.cmds in a subshell (stdin /dev/null, stdout and
#                    stderr to job.log; the commands there stop at the first failure), then
#                    records the exit code atomically (temp file + mv) in exit_code.
#   sh job.sh start  The launcher used over SSH. Reads NAME=value secret lines from stdin
#                    into its own environment (never a file, never a command line), starts
#                    `setsid sh ./job.sh run` detached, waits until job.pid exists and
#                    prints `pid N`.

_ob_put() {
    printf '%s\n' "$2" >"$1.tmp.$$" && mv -f "$1.tmp.$$" "$1"
}

case ${1-} in
run)
    rm -f exit_code cancelling cancelled
    # Cancel signals the whole process group recorded here: refuse to record one that
    # is not ours alone (on Linux, where /proc tells).
    if { read -r _ob_stat <"/proc/$$/stat"; } 2>/dev/null; then
        _ob_stat=${_ob_stat##*) }
        set -- $_ob_stat
        if [ "${3-}" != "$$" ]; then
            echo "overbrainer: the job wrapper must lead its own process group (start it with setsid)" >job.log
            _ob_put exit_code 125
            exit 125
        fi
    fi
    _ob_put job.pid "$$"
    trap '' HUP
    (. ./job.cmds) </dev/null >job.log 2>&1
    _ob_put exit_code "$?"
    exit 0
    ;;
start)
    if ! command -v setsid >/dev/null 2>&1; then
        echo "setsid is not installed on this host; install util-linux (or busybox) there" >&2
        exit 3
    fi
    while IFS= read -r _ob_line; do
        case $_ob_line in
        *=*) ;;
        *)
            echo "overbrainer: refused a secret line without '='" >&2
            exit 2
            ;;
        esac
        _ob_name=${_ob_line%%=*}
        case $_ob_name in
        '' | [0-9]* | *[!A-Za-z0-9_]*)
            echo "overbrainer: refused a secret with an invalid name" >&2
            exit 2
            ;;
        esac
        export "$_ob_name=${_ob_line#*=}"
    done
    unset _ob_line _ob_name
    rm -f job.pid exit_code cancelling cancelled
    setsid sh ./job.sh run </dev/null >/dev/null 2>&1 &
    _ob_tick=0.05
    _ob_left=200
    sleep 0.01 2>/dev/null || { _ob_tick=1 && _ob_left=10; }
    while [ ! -s job.pid ]; do
        if [ -s exit_code ] || [ "$_ob_left" -le 0 ]; then
            echo "the job wrapper did not start; see job.log in $(pwd)" >&2
            exit 4
        fi
        _ob_left=$((_ob_left - 1))
        sleep "$_ob_tick"
    done
    read -r _ob_pid <job.pid
    printf 'pid %s\n' "$_ob_pid"
    ;;
*)
    echo "usage: sh job.sh run|start" >&2
    exit 2
    ;;
esac
