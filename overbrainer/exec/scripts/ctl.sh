# overbrainer job control: POSIX sh, the same under sh, dash and busybox sh.
#
#   sh ctl.sh status DIR               print running | exited N | cancelling | cancelled | lost
#   sh ctl.sh cancel DIR [GRACE]       stop the job (SIGTERM, GRACE s, SIGKILL); print its state
#   sh ctl.sh manifest DIR PATH...     sha256sum lines for the regular files under PATHs
#   sh ctl.sh pack DIR PATH...         the same files as tar archive(s) on stdout
#   sh ctl.sh read FILE OFFSET LIMIT   up to LIMIT bytes of FILE from OFFSET (none if missing)
#   sh ctl.sh size FILE                FILE's size in bytes (0 if missing)
#   sh ctl.sh touch FILE               create FILE and its parent directories
#
# Status priority: cancelled > cancelling > exit_code > process group alive > lost.
# Directories below `checkpoint-*` never enter a manifest or a pack, unless a PATH names
# one itself (the checkpoint a stopped job saved). A PATH that is a link to a directory
# (the run's output on a network volume) is walked; no link below a PATH is followed.

_ob_put() {
    printf '%s\n' "$2" >"$1.tmp.$$" && mv -f "$1.tmp.$$" "$1"
}

# A pid we may signal as a process group: digits only, no leading zero, above 1.
_ob_valid_pid() {
    case $1 in
    '' | 0* | *[!0-9]*) return 1 ;;
    esac
    [ "${#1}" -le 9 ] && [ "$1" -gt 1 ]
}

# Whether process group $1 has a member that is not a zombie. kill -0 alone counts
# zombies (a job whose parent never reaps it); on Linux /proc tells them apart.
_ob_alive() {
    _ob_pg=$1
    kill -0 "-$_ob_pg" 2>/dev/null || return 1
    [ -r "/proc/$$/stat" ] || return 0
    if { read -r _ob_s <"/proc/$_ob_pg/stat"; } 2>/dev/null; then
        _ob_s=${_ob_s##*) }
        set -- $_ob_s
        case $1 in
        Z | X) ;;
        *) [ "$3" = "$_ob_pg" ] && return 0 ;;
        esac
    fi
    for _ob_d in /proc/[0-9]*; do
        { read -r _ob_s <"$_ob_d/stat"; } 2>/dev/null || continue
        _ob_s=${_ob_s##*) }
        set -- $_ob_s
        case $1 in
        Z | X) ;;
        *) [ "$3" = "$_ob_pg" ] && return 0 ;;
        esac
    done
    return 1
}

# The job's pid from job.pid, if it is one we may signal; empty otherwise.
_ob_job_pid() {
    _ob_pid=
    read -r _ob_pid 2>/dev/null <job.pid
    if _ob_valid_pid "$_ob_pid"; then
        printf '%s\n' "$_ob_pid"
    fi
}

_ob_status() {
    # Whether the group lives is read BEFORE the markers: the job writes exit_code while
    # its group still lives, so a group seen gone has left its exit code already. Read the
    # other way round, a job ending between the two reads looks lost.
    _ob_live=
    _ob_pid=$(_ob_job_pid)
    if [ -n "$_ob_pid" ] && _ob_alive "$_ob_pid"; then
        _ob_live=yes
    fi
    if [ -e cancelled ]; then
        echo cancelled
    elif [ -e cancelling ]; then
        echo cancelling
    elif [ -e exit_code ]; then
        _ob_code=
        read -r _ob_code 2>/dev/null <exit_code
        case $_ob_code in
        '' | *[!0-9]*) echo "exited ?" ;;
        *) echo "exited $_ob_code" ;;
        esac
    elif [ -n "$_ob_live" ]; then
        echo running
    else
        echo lost
    fi
}

# Sleep one tick; _ob_ticks N sets _ob_left to the number of ticks in N seconds.
_ob_ticks() {
    if sleep 0.01 2>/dev/null; then
        _ob_tick=0.1
        _ob_left=$(($1 * 10))
    else
        _ob_tick=1
        _ob_left=$1
    fi
}

# The clock in whole seconds (empty if date cannot tell).
_ob_now() {
    _ob_t=$(date +%s 2>/dev/null)
    case $_ob_t in
    '' | *[!0-9]*) _ob_t= ;;
    esac
}

# Wait until process group $1 is gone or $2 seconds passed; fail if still alive. The
# seconds are the clock's: on a busy machine a look at the processes takes long, and
# counting sleeps alone stretched a 10 s grace to a minute. The count of sleeps still
# bounds the wait should the clock be stepped back meanwhile.
_ob_wait_gone() {
    _ob_ticks "$2"
    _ob_now
    _ob_until=
    [ -n "$_ob_t" ] && _ob_until=$((_ob_t + $2))
    while _ob_alive "$1"; do
        [ "$_ob_left" -le 0 ] && return 1
        _ob_left=$((_ob_left - 1))
        if [ -n "$_ob_until" ]; then
            _ob_now
            [ -n "$_ob_t" ] && [ "$_ob_t" -gt "$_ob_until" ] && return 1
        fi
        sleep "$_ob_tick"
    done
    return 0
}

_ob_cancel() {
    _ob_grace=$1
    _ob_was=$(_ob_status)
    case $_ob_was in
    running | cancelling) ;;
    *)
        # Ended already (or cancelled before): its real result stands.
        echo "$_ob_was"
        return 0
        ;;
    esac
    _ob_put cancelling "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if [ "$_ob_was" = running ] && [ -e exit_code ]; then
        # It ended on its own between the read and the marker.
        rm -f cancelling
        _ob_status
        return 0
    fi
    _ob_engine=
    _ob_name=
    read -r _ob_engine _ob_name 2>/dev/null <job.container
    case $_ob_engine in
    docker | podman)
        case $_ob_name in
        '' | [!A-Za-z0-9]* | *[!A-Za-z0-9_.-]*) ;;
        *) "$_ob_engine" stop -t "$_ob_grace" "$_ob_name" >/dev/null 2>&1 ;;
        esac
        ;;
    esac
    _ob_pid=$(_ob_job_pid)
    _ob_mine=
    if { read -r _ob_s <"/proc/$$/stat"; } 2>/dev/null; then
        _ob_s=${_ob_s##*) }
        set -- $_ob_s
        _ob_mine=$3
    fi
    if [ -n "$_ob_pid" ] && [ "$_ob_pid" != "$_ob_mine" ] && _ob_alive "$_ob_pid"; then
        kill -TERM "-$_ob_pid" 2>/dev/null
        if ! _ob_wait_gone "$_ob_pid" "$_ob_grace"; then
            kill -KILL "-$_ob_pid" 2>/dev/null
            _ob_wait_gone "$_ob_pid" 5
        fi
    fi
    _ob_put cancelled "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo cancelled
}

# Keep only the PATH arguments that exist; then run find over them. A PATH that is itself
# a checkpoint directory (asked for by name) is walked on its own, its files included.
_ob_find() {
    _ob_action=$1
    shift
    for _ob_p do
        shift
        if [ -e "$_ob_p" ] || [ -L "$_ob_p" ]; then
            case ${_ob_p##*/} in
            checkpoint-*)
                [ -d "$_ob_p" ] && [ ! -L "$_ob_p" ] || continue
                find "$_ob_p" -mindepth 1 \( -type d -name 'checkpoint-*' -prune \) -o \
                    -type f -exec $_ob_action {} + || return $?
                ;;
            *) set -- "$@" "$_ob_p" ;;
            esac
        fi
    done
    [ "$#" -gt 0 ] || return 0
    # -H: a PATH that is a link is followed (a run's output on a network volume), the
    # links below it are not.
    find -H "$@" \( -type d -name 'checkpoint-*' -prune \) -o -type f -exec $_ob_action {} +
}

_ob_empty_sum=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
_ob_cmd=${1-}
[ "$#" -gt 0 ] && shift
case $_ob_cmd in
status)
    cd "$1" 2>/dev/null || { echo lost && exit 0; }
    _ob_status
    ;;
cancel)
    cd "$1" 2>/dev/null || { echo lost && exit 0; }
    _ob_cancel "${2:-10}"
    ;;
manifest)
    cd "$1" 2>/dev/null || { echo "there is no run directory $1" >&2 && exit 1; }
    shift
    # OpenSSL's digest uses the CPU's SHA extensions: several times faster than
    # coreutils' sha256sum on big model files. -r prints sha256sum's format.
    if command -v openssl >/dev/null 2>&1 &&
        [ "$(openssl dgst -sha256 -r </dev/null 2>/dev/null)" = "$_ob_empty_sum *stdin" ]; then
        _ob_find "openssl dgst -sha256 -r" "$@"
    elif command -v sha256sum >/dev/null 2>&1; then
        _ob_find sha256sum "$@"
    elif command -v shasum >/dev/null 2>&1; then
        _ob_find "shasum -a 256" "$@"
    else
        echo "neither sha256sum nor shasum is installed on this host" >&2
        exit 3
    fi
    ;;
pack)
    cd "$1" 2>/dev/null || { echo "there is no run directory $1" >&2 && exit 1; }
    shift
    _ob_find "tar -cf -" "$@"
    ;;
read)
    [ -f "$1" ] || exit 0
    tail -c "+$(($2 + 1))" "$1" | head -c "$3"
    ;;
size)
    if [ -f "$1" ]; then wc -c <"$1"; else echo 0; fi
    ;;
touch)
    case $1 in
    */*) mkdir -p "${1%/*}" || exit 1 ;;
    esac
    touch "$1"
    ;;
*)
    echo "usage: sh ctl.sh status|cancel|manifest|pack|read|size|touch ..." >&2
    exit 2
    ;;
esac
