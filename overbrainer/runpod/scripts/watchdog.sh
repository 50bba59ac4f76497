#!/bin/sh
# overbrainer pod watchdog: the bound on what a pod can cost (POSIX sh; needs only curl).
#
# First proves that the pod's own Runpod key can read this pod and writes the verdict to
# $OVERBRAINER_RUN_DIR/.pod/watchdog: `ready`, or `failed <reason>`. Then, at every check,
# it deletes the pod on the first rule that matches:
#   1. the bootstrap failed (.pod/bootstrap_failed) - at once;
#   2. kept (--keep-pod) and the job started (job.pid) - never, for any reason;
#   3. past the deadline: max_hours since the pod's creation;
#   3b. past the cost cap (reason `cost_cap`): the pod's rate, read from Runpod with its
#      creation, times its age reached OVERBRAINER_MAX_COST_USD; at 95 % of it the cap is
#      near, which is written once to .pod/cost_cap_near (and logged) without deleting;
#   3c. (not a delete) a running job is asked, once, to save a checkpoint and stop - the
#      request `train stop` writes, stop_request in the run directory, holding the reason
#      (`deadline` or `cost_cap`; `stall` in 5b) - OVERBRAINER_SAVE_BEFORE seconds before the deadline, or
#      when the cost cap is near: the bound then ends the run with a checkpoint, not a loss;
#   4. the results were retrieved (.pod/retrieved);
#   5. the job ended (exit_code or cancelled) and was not retrieved within the retrieve grace;
#   5b. stalled (reason `stall`): the job started and has not ended, and its metrics file
#      (metrics.jsonl) has not grown for OVERBRAINER_STALL_SECONDS - before it has grown at
#      all, for OVERBRAINER_FIRST_STEP_SECONDS since the job was seen started, and as long
#      once its last line says training is over (a phase: saving, merging): the job is
#      asked, once, to save a checkpoint and stop (stop_request holding `stall`), and the
#      pod is deleted OVERBRAINER_STALL_GRACE seconds later unless the file grew meanwhile;
#   6. no job started (no job.pid) within the boot grace since the watchdog started.
# A delete falls back to the `terminate` action, then `stop`; a failed one is retried at the
# next check; a 404 in Runpod's error shape means the pod is gone and the watchdog ends.
#
# A cluster's node (Runpod's answer for the pod names its `cluster`): Runpod refuses to
# delete a member alone (409), so wherever the pod would be deleted the whole cluster is
# (DELETE /clusters/{id}, every member), retried likewise until its 404; and the cost cap
# counts every node: the pod's rate times NUM_NODES, its nodes being identical.
#
# The key is never logged, echoed or put on a command line: curl reads it from a config on
# its standard input (a here-document, which no `ps` shows).
#
# Time: nothing here trusts a wall clock, neither this pod's nor that of the machine that
# created it (a laptop hours off, or waking up). The pod's age comes from Runpod's own
# clock - the Date of its answer to the first read minus the pod's createdAt - and from
# then on every span is counted on /proc/uptime, which setting a clock never moves (the
# wall clock only where /proc/uptime cannot be read).
#
# Environment:
#   RUNPOD_POD_ID, RUNPOD_API_KEY   the pod's ID and its pod-scoped key (set by Runpod)
#   OVERBRAINER_API_BASE            Runpod's REST API (https://api.runpod.io/v2)
#   OVERBRAINER_RUN_DIR             the run's directory on the pod
#   OVERBRAINER_MAX_SECONDS         delete the pod this long after its creation (required)
#   OVERBRAINER_MAX_COST_USD        delete the pod once it cost this much (USD; optional)
#   OVERBRAINER_SAVE_BEFORE         ask the job to save and stop this long before the
#                                   deadline (seconds; 0 or unset: only at the cost cap)
#   OVERBRAINER_COST_PER_HOUR       the rate to count with when Runpod's answer gives none
#                                   (USD/h; optional): with a cap and no rate from either,
#                                   the cost cannot be bounded and the pod is deleted at once
#                                   (on a cluster: one node's rate; the cap is the cluster's)
#   NUM_NODES                       on a cluster's node, the cluster's nodes (set by Runpod;
#                                   else read from the cluster)
#   OVERBRAINER_STALL_SECONDS       a running job whose metrics file has not grown this long
#                                   is stalled (seconds; unset: no stall rule)
#   OVERBRAINER_FIRST_STEP_SECONDS  the same before the file has grown at all, counted from
#                                   the job's start (seconds; default: the stall seconds)
#   OVERBRAINER_STALL_GRACE         seconds a stalled job asked to save and stop has before
#                                   the pod is deleted (300)
#   OVERBRAINER_BOOT_GRACE          seconds for the job to start (1800)
#   OVERBRAINER_RETRIEVE_GRACE      seconds to retrieve the results of an ended job (3600)
#   OVERBRAINER_INTERVAL            seconds between checks (60)
#   OVERBRAINER_KEEP                1 for --keep-pod
#   OVERBRAINER_BOOTSTRAP_FAILED    why the bootstrap failed, if it did
#   OVERBRAINER_READ_ATTEMPTS       reads of the pod before giving up on the API (5)
#   OVERBRAINER_RETRY_DELAY         seconds between those reads (5)
#   OVERBRAINER_HTTP_TIMEOUT        seconds a request may take (30)
# Times may have a fraction (0.5): tests run the watchdog in seconds. Amounts and rates are
# counted in millionths of a dollar: the cap rounded down and the rate up, so that the time
# the cap allows is never longer than its exact value.

# The job wrapper's markers, in the run directory.
JOB_PID=job.pid
EXIT_CODE=exit_code
CANCELLED=cancelled
# Written once the pod has cost 95 % of its cap (in .pod/).
CAP_NEAR=cost_cap_near
# The save-and-stop request the job's metrics plugin looks for after every step.
STOP_REQUEST=stop_request
# The job's metrics, a line per trainer log: a file that stops growing is a stalled job.
METRICS=metrics.jsonl

base=${OVERBRAINER_API_BASE:-https://api.runpod.io/v2}
base=${base%/}
run_dir=${OVERBRAINER_RUN_DIR:-.}
pod_dir=$run_dir/.pod
log_file=$pod_dir/watchdog.log
pod_id=${RUNPOD_POD_ID:-}
keep=${OVERBRAINER_KEEP:-0}
bad_settings=

stamp() {
    date -u +%Y-%m-%dT%H:%M:%SZ
}

log() {
    line="$(stamp) watchdog: $*"
    printf '%s\n' "$line"
    printf '%s\n' "$line" >>"$log_file" 2>/dev/null
}

# to_ms VALUE: sets $ms to VALUE (seconds, a fraction allowed) in milliseconds; returns 1
# when VALUE is not such a number.
to_ms() {
    case $1 in
    '' | .* | *. | *.*.* | *[!0-9.]*) return 1 ;;
    esac
    whole=${1%%.*}
    case $1 in
    *.*) frac=${1#*.}000 ;;
    *) frac=000 ;;
    esac
    frac=${frac%"${frac#???}"}
    # A leading zero would make shell arithmetic read the number as octal.
    while [ "${#whole}" -gt 1 ] && [ "${whole#0}" != "$whole" ]; do whole=${whole#0}; done
    while [ "${#frac}" -gt 1 ] && [ "${frac#0}" != "$frac" ]; do frac=${frac#0}; done
    ms=$((whole * 1000 + frac))
}

# to_micro VALUE UP: sets $micro to VALUE (dollars, a fraction allowed) in millionths of a
# dollar, rounded down, or up when UP is 1; returns 1 when VALUE is not such a number or is
# beyond a million dollars (the products below must fit in 63 bits).
to_micro() {
    case $1 in
    '' | .* | *. | *.*.* | *[!0-9.]*) return 1 ;;
    esac
    whole=${1%%.*}
    case $1 in
    *.*) frac=${1#*.} ;;
    *) frac= ;;
    esac
    digits "$whole"
    whole=$n
    [ "${#whole}" -le 7 ] || return 1
    [ "$whole" -le 1000000 ] || return 1
    six=${frac}000000
    six=${six%"${six#??????}"}
    rest=${frac#??????}
    [ "${#frac}" -gt 6 ] || rest=
    digits "$six"
    micro=$((whole * 1000000 + n))
    if [ "${2:-0}" = 1 ]; then
        case $rest in *[1-9]*) micro=$((micro + 1)) ;; esac
    fi
}

# bound NAME VALUE: sets $ms; a value that is not a number is a bad setting, which leaves
# the pod unbounded, so the watchdog deletes it at once.
bound() {
    if ! to_ms "$2"; then
        bad_settings="${bad_settings}${bad_settings:+, }$1"
        ms=0
    fi
}

# The pod's monotonic time in milliseconds, in $now: /proc/uptime, which no change of the
# wall clock moves; the wall clock (whole seconds where date lacks %N) only on a machine
# without it. An unreadable /proc/uptime keeps the last reading.
clock=wall
if { read -r up _ </proc/uptime; } 2>/dev/null && to_ms "$up"; then
    clock=uptime
fi
now_ms() {
    if [ "$clock" = uptime ]; then
        if { read -r up _ </proc/uptime; } 2>/dev/null && to_ms "$up"; then
            now=$ms
        fi
        return
    fi
    now=$(date +%s%N 2>/dev/null)
    case $now in
    '' | *[!0-9]*) now=$(($(date +%s) * 1000)) ;;
    *) now=${now%??????} ;;
    esac
}

# digits VALUE: sets $n to VALUE without leading zeros (arithmetic reads 08 as octal).
digits() {
    n=$1
    while [ "${#n}" -gt 1 ] && [ "${n#0}" != "$n" ]; do n=${n#0}; done
}

# epoch TEXT: sets $epoch to TEXT in seconds since 1970-01-01 UTC, for Runpod's createdAt
# (RFC 3339: 2026-03-13T20:00:00Z; a fraction and an offset allowed) or an HTTP Date
# (Fri, 13 Mar 2026 20:00:00 GMT); returns 1 for anything else. Plain arithmetic: GNU and
# busybox `date -d` read dates differently, and an image may have neither.
epoch() {
    zone=0
    case $1 in
    [0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9][Tt\ ][0-9][0-9]:[0-9][0-9]:[0-9][0-9]*)
        rest=${1#???????????????????}
        fields=${1%"$rest"}
        case $rest in
        .*)
            rest=${rest#.}
            while :; do
                case $rest in
                [0-9]*) rest=${rest#?} ;;
                *) break ;;
                esac
            done
            ;;
        esac
        case $rest in
        '' | [Zz]) ;;
        [+-][0-9][0-9]:[0-9][0-9] | [+-][0-9][0-9][0-9][0-9])
            hhmm=${rest#?}
            case $hhmm in *:*) hhmm=${hhmm%:*}${hhmm#*:} ;; esac
            digits "${hhmm%??}"
            zone=$((n * 3600))
            digits "${hhmm#??}"
            zone=$((zone + n * 60))
            case $rest in -*) zone=$((0 - zone)) ;; esac
            ;;
        *) return 1 ;;
        esac
        old_ifs=$IFS
        IFS='-:Tt '
        # shellcheck disable=SC2086 # split on IFS, on purpose
        set -- $fields
        IFS=$old_ifs
        year=$1 month=$2 day=$3 hour=$4 minute=$5 second=$6
        ;;
    [A-Z][a-z][a-z],\ [0-9][0-9]\ [A-Z][a-z][a-z]\ [0-9][0-9][0-9][0-9]\ [0-9][0-9]:[0-9][0-9]:[0-9][0-9]\ GMT)
        old_ifs=$IFS
        IFS=' :,'
        # shellcheck disable=SC2086 # split on IFS, on purpose
        set -- $1
        IFS=$old_ifs
        day=$2 year=$4 hour=$5 minute=$6 second=$7
        case $3 in
        Jan) month=1 ;; Feb) month=2 ;; Mar) month=3 ;; Apr) month=4 ;;
        May) month=5 ;; Jun) month=6 ;; Jul) month=7 ;; Aug) month=8 ;;
        Sep) month=9 ;; Oct) month=10 ;; Nov) month=11 ;; Dec) month=12 ;;
        *) return 1 ;;
        esac
        ;;
    *) return 1 ;;
    esac
    digits "$year"; year=$n
    digits "$month"; month=$n
    digits "$day"; day=$n
    digits "$hour"; hour=$n
    digits "$minute"; minute=$n
    digits "$second"; second=$n
    if [ "$month" -lt 1 ] || [ "$month" -gt 12 ] || [ "$day" -lt 1 ] || [ "$day" -gt 31 ] ||
        [ "$hour" -gt 23 ] || [ "$minute" -gt 59 ] || [ "$second" -gt 60 ]; then
        return 1
    fi
    # Days since 1970-01-01 of a proleptic Gregorian date, years counted from March.
    if [ "$month" -le 2 ]; then
        year=$((year - 1))
        month=$((month + 9))
    else
        month=$((month - 3))
    fi
    era=$((year / 400))
    of_era=$((year - era * 400))
    of_era=$((of_era * 365 + of_era / 4 - of_era / 100 + (153 * month + 2) / 5 + day - 1))
    epoch=$(((era * 146097 + of_era - 719468) * 86400 + hour * 3600 + minute * 60 + second))
    epoch=$((epoch - zone))
}

# A duration in milliseconds, for people.
shown() {
    if [ $(($1 % 1000)) -eq 0 ]; then
        printf '%ss' $(($1 / 1000))
    else
        printf '%s.%03ds' $(($1 / 1000)) $(($1 % 1000))
    fi
}

bound OVERBRAINER_BOOT_GRACE "${OVERBRAINER_BOOT_GRACE:-1800}"
boot_grace_ms=$ms
bound OVERBRAINER_RETRIEVE_GRACE "${OVERBRAINER_RETRIEVE_GRACE:-3600}"
retrieve_grace_ms=$ms
bound OVERBRAINER_MAX_SECONDS "${OVERBRAINER_MAX_SECONDS:-}"
max_ms=$ms
# When to ask the job to save before the deadline (save_ms after the pod's creation); a
# bad value, or one that leaves no time to train, asks only at the cost cap: the deadline
# itself still holds.
save_ms=
save_note=
if [ -n "${OVERBRAINER_SAVE_BEFORE:-}" ]; then
    if ! to_ms "$OVERBRAINER_SAVE_BEFORE"; then
        save_note="OVERBRAINER_SAVE_BEFORE is not a number of seconds: the job is not asked to save before the deadline"
    elif [ "$ms" -gt 0 ] && [ "$ms" -lt "$max_ms" ]; then
        save_ms=$((max_ms - ms))
    elif [ "$ms" -gt 0 ]; then
        save_note="OVERBRAINER_SAVE_BEFORE ($(shown "$ms")) leaves no time before the deadline: the job is not asked to save before it"
    fi
fi
# The stall rule, if any (stall_ms). A bad value disables it with a note: it is no bound on
# the pod's cost, which the deadline and the cap keep.
stall_ms=
first_step_ms=
stall_grace_ms=
stall_note=
if [ -n "${OVERBRAINER_STALL_SECONDS:-}" ]; then
    if to_ms "$OVERBRAINER_STALL_SECONDS" && [ "$ms" -gt 0 ]; then
        stall_ms=$ms
        first_step_ms=$ms
        if [ -n "${OVERBRAINER_FIRST_STEP_SECONDS:-}" ]; then
            if to_ms "$OVERBRAINER_FIRST_STEP_SECONDS" && [ "$ms" -gt 0 ]; then
                first_step_ms=$ms
            else
                stall_note="OVERBRAINER_FIRST_STEP_SECONDS is not a positive number of seconds: the stall bound counts before the first line too"
            fi
        fi
        stall_grace_ms=300000
        if [ -n "${OVERBRAINER_STALL_GRACE:-}" ]; then
            if to_ms "$OVERBRAINER_STALL_GRACE"; then
                stall_grace_ms=$ms
            else
                stall_note="OVERBRAINER_STALL_GRACE is not a number of seconds: a stalled job has $(shown "$stall_grace_ms") to stop"
            fi
        fi
    else
        stall_note="OVERBRAINER_STALL_SECONDS is not a positive number of seconds: a stalled job is not stopped (the deadline still holds)"
    fi
fi
# The cost cap, if any; a cap that is not a positive amount is a bad setting too. Its time
# (cap_ms after the pod's creation) is known once the pod's rate is (cap_time).
cap_micro=
cap_ms=
near_ms=
if [ -n "${OVERBRAINER_MAX_COST_USD+set}" ]; then
    if to_micro "$OVERBRAINER_MAX_COST_USD" 0 && [ "$micro" -gt 0 ]; then
        cap_micro=$micro
    else
        bad_settings="${bad_settings}${bad_settings:+, }OVERBRAINER_MAX_COST_USD"
    fi
fi
# The rate overbrainer expects, for an answer without one (a bad one counts as none).
rate_hint=
if [ -n "${OVERBRAINER_COST_PER_HOUR:-}" ] && to_micro "$OVERBRAINER_COST_PER_HOUR" 1 &&
    [ "$micro" -gt 0 ]; then
    rate_hint=$micro
fi
# How it talks to the API and how often it checks: a bad value falls back to the default.
attempts=${OVERBRAINER_READ_ATTEMPTS:-5}
case $attempts in '' | *[!0-9]* | 0) attempts=5 ;; esac
retry_delay=${OVERBRAINER_RETRY_DELAY:-5}
to_ms "$retry_delay" || retry_delay=5
http_timeout=${OVERBRAINER_HTTP_TIMEOUT:-30}
case $http_timeout in '' | *[!0-9]* | 0) http_timeout=30 ;; esac
interval=${OVERBRAINER_INTERVAL:-60}
if ! to_ms "$interval" || [ "$ms" -eq 0 ]; then
    interval=60
fi

mkdir -p "$pod_dir" 2>/dev/null
work=$(mktemp -d "${TMPDIR:-/tmp}/overbrainer-watchdog.XXXXXX") || work=$pod_dir
body=$work/body
headers=$work/headers
sleeper=

finish() {
    if [ -n "$sleeper" ]; then
        kill "$sleeper" 2>/dev/null
        wait "$sleeper" 2>/dev/null
    fi
    [ "$work" = "$pod_dir" ] || rm -rf "$work"
    exit "$1"
}
trap 'finish 0' TERM INT HUP

# Sleeps in the background so that a signal ends the watchdog at once.
pause() {
    sleep "$1" &
    sleeper=$!
    wait "$sleeper"
    sleeper=
}

# api METHOD PATH [JSON]: sets $code (the HTTP status, 000 without an answer) and $rc
# (curl's exit status); the answer's body is in $body and its headers in $headers.
api() {
    rm -f "$body" "$headers"
    if [ -n "${3:-}" ]; then
        set -- "$1" "$2" -H 'Content-Type: application/json' --data "$3"
    fi
    method=$1
    path=$2
    shift 2
    curl -sS -o "$body" -D "$headers" -w '%{http_code}' -X "$method" \
        --connect-timeout 10 --max-time "$http_timeout" -K - "$@" \
        "$base$path" >"$work/code" 2>/dev/null <<EOF
header = "Authorization: Bearer $RUNPOD_API_KEY"
user-agent = "overbrainer-watchdog"
EOF
    rc=$?
    code=$(cat "$work/code" 2>/dev/null)
    case $code in
    [0-9][0-9][0-9]) ;;
    *) code=000 ;;
    esac
}

# What the last answer was, for a log line.
answer() {
    if [ "$code" = 000 ]; then
        printf 'no answer (curl exit status %s)' "$rc"
    else
        printf 'HTTP %s' "$code"
    fi
}

# A 404 counts as "gone" only in Runpod's own error shape (problem+json, status 404).
gone() {
    [ "$code" = 404 ] && grep -Eq '"status"[[:space:]]*:[[:space:]]*404' "$body" 2>/dev/null
}

transient() {
    case $code in
    000 | 408 | 429 | 5[0-9][0-9]) return 0 ;;
    esac
    return 1
}

# Seconds to wait before retrying: Retry-After when the answer gave one (capped).
retry_wait() {
    wait_s=$(sed -n 's/^[Rr][Ee][Tt][Rr][Yy]-[Aa][Ff][Tt][Ee][Rr]:[[:space:]]*\([0-9][0-9]*\).*/\1/p' \
        "$headers" 2>/dev/null | head -n 1)
    case $wait_s in
    '' | *[!0-9]*) wait_s=$retry_delay ;;
    *) [ "$wait_s" -le 60 ] || wait_s=60 ;;
    esac
    printf '%s' "$wait_s"
}

verdict() {
    log "verdict: $1"
    if printf '%s\n' "$1" >"$pod_dir/.watchdog.tmp" 2>/dev/null &&
        mv -f "$pod_dir/.watchdog.tmp" "$pod_dir/watchdog"; then
        :
    else
        log "cannot write the verdict to $pod_dir/watchdog"
    fi
}

# Proves the key can read this pod; 0 when the guard loop can use the API.
prove_key() {
    if ! command -v curl >/dev/null 2>&1; then
        verdict "failed missing curl: the image has no curl to reach Runpod's API"
        return 1
    fi
    if [ -z "${RUNPOD_API_KEY:-}" ]; then
        verdict "failed missing key: RUNPOD_API_KEY is not set"
        return 1
    fi
    case $RUNPOD_API_KEY in
    *[!A-Za-z0-9._~+/=-]*)
        verdict "failed malformed key: RUNPOD_API_KEY holds characters no key has"
        return 1
        ;;
    esac
    case $pod_id in
    '' | *[!A-Za-z0-9_-]*)
        verdict "failed missing pod id: RUNPOD_POD_ID is not set or not an ID"
        return 1
        ;;
    esac
    attempt=1
    while :; do
        api GET "/pods/$pod_id"
        case $code in
        200)
            if grep -q "\"$pod_id\"" "$body" 2>/dev/null; then
                if ! membership; then
                    verdict "failed unexpected answer: the pod's cluster has no usable id"
                    return 0
                fi
                pod_age
                cap_time
                if [ -n "$bad_settings" ]; then
                    verdict "failed bad settings: $bad_settings"
                else
                    verdict ready
                fi
            else
                verdict "failed unexpected answer: HTTP 200 without this pod"
            fi
            return 0
            ;;
        401 | 403)
            verdict "failed refused key (HTTP $code)"
            return 0
            ;;
        404)
            verdict "failed pod not found (HTTP 404)"
            return 0
            ;;
        esac
        if ! transient; then
            verdict "failed unexpected answer ($(answer))"
            return 0
        fi
        if [ "$attempt" -ge "$attempts" ]; then
            verdict "failed unreachable after $attempts attempts (last: $(answer))"
            return 0
        fi
        delay=$(retry_wait)
        log "reading pod $pod_id: $(answer); retrying in ${delay}s ($attempt of $attempts)"
        pause "$delay"
        attempt=$((attempt + 1))
    done
}

# membership: a cluster's member is told by Runpod's answer for it in $body - its `cluster`
# object, {id, rank, ...}, which a standalone pod's answer omits - and sets $cluster_id
# (empty for a standalone pod); returns 1 for a cluster without an id that can be used.
cluster_id=
# Who pays the cost cap, for the log: the pod, or its whole cluster.
payer=pod
membership() {
    found=$(tr -d '\r\n' <"$body" 2>/dev/null |
        grep -o '"cluster"[[:space:]]*:[[:space:]]*{[^}]*}' | head -n 1)
    [ -n "$found" ] || return 0
    value=$(printf '%s\n' "$found" | grep -o '"id"[[:space:]]*:[[:space:]]*"[^"]*"' |
        head -n 1 | sed 's/^"id"[[:space:]]*:[[:space:]]*"//; s/"$//')
    case $value in
    '' | *[!A-Za-z0-9_-]*)
        log "pod $pod_id belongs to a cluster whose id cannot be used: ${value:-none given}"
        return 1
        ;;
    esac
    cluster_id=$value
    payer=cluster
    rank=$(printf '%s\n' "$found" | grep -o '"rank"[[:space:]]*:[[:space:]]*[0-9][0-9]*' |
        head -n 1 | sed 's/^"rank"[[:space:]]*:[[:space:]]*//')
    log "pod $pod_id is node ${rank:-(rank not assigned yet)} of cluster $cluster_id: wherever this pod would be deleted, the whole cluster is"
}

# cluster_nodes: sets $nodes, the number of the cluster's nodes - Runpod's NUM_NODES, else
# the cluster's podCount as Runpod answers it - or leaves it empty when neither tells.
# A passing failure of that read is retried as the pod's own read is: an unknown count
# fails the verdict, which ends the whole cluster. The answer replaces $body.
cluster_nodes() {
    nodes=
    nodes_from=NUM_NODES
    value=${NUM_NODES:-}
    if [ -z "$value" ] || ! positive "$value"; then
        nodes_from="the cluster's podCount"
        tries=1
        while api GET "/clusters/$cluster_id"; [ "$code" != 200 ] && transient &&
            [ "$tries" -lt "$attempts" ]; do
            delay=$(retry_wait)
            log "reading cluster $cluster_id: $(answer); retrying in ${delay}s ($tries of $attempts)"
            pause "$delay"
            tries=$((tries + 1))
        done
        value=
        if [ "$code" = 200 ]; then
            value=$(tr -d '\r\n' <"$body" 2>/dev/null |
                grep -o '"podCount"[[:space:]]*:[[:space:]]*[0-9][0-9]*' | head -n 1 |
                sed 's/^"podCount"[[:space:]]*:[[:space:]]*//')
        fi
        [ -n "$value" ] && positive "$value" || return 0
    fi
    nodes=$n
}

# positive VALUE: sets $n to VALUE, a whole number from 1 to 9999 (the products with a
# rate must fit in 63 bits); returns 1 for anything else.
positive() {
    case $1 in '' | *[!0-9]*) return 1 ;; esac
    digits "$1"
    [ "${#n}" -le 4 ] && [ "$n" -gt 0 ]
}

# dollars MICRO: an amount in millionths of a dollar, for people ($1.50, $0.000125).
dollars() {
    cents=$(($1 / 10000))
    left=$(($1 % 10000))
    if [ "$left" -eq 0 ]; then
        printf '$%s.%02d' $((cents / 100)) $((cents % 100))
    else
        printf '$%s.%06d' $(($1 / 1000000)) $(($1 % 1000000))
    fi
}

# cap_time: with a cost cap, reads the pod's rate (USD/h) from the answer in $body - its
# `cost`, the highest where several are given, never a cheaper one - or else takes
# OVERBRAINER_COST_PER_HOUR, and sets $cap_ms (when the pod has cost its cap, after its
# creation: the cap over the rate, rounded down) and $near_ms (95 % of it). Without a rate
# the cost cannot be bounded: a bad setting, which deletes the pod at once.
cap_time() {
    [ -n "$cap_micro" ] || return 0
    rate=
    rate_from="the pod's rate by Runpod"
    # A cost in another form (an exponent) counts as none: never a misread, cheaper rate.
    for value in $(grep -o '"cost"[[:space:]]*:[[:space:]]*[0-9][0-9.eE+-]*' "$body" 2>/dev/null |
        sed 's/^"cost"[[:space:]]*:[[:space:]]*//'); do
        if to_micro "$value" 1 && [ "$micro" -gt 0 ] &&
            { [ -z "$rate" ] || [ "$micro" -gt "$rate" ]; }; then
            rate=$micro
        fi
    done
    if [ -z "$rate" ] && [ -n "$rate_hint" ]; then
        rate=$rate_hint
        rate_from="the rate overbrainer expected (Runpod's answer gives none)"
    fi
    if [ -z "$rate" ]; then
        bad_settings="${bad_settings}${bad_settings:+, }OVERBRAINER_MAX_COST_USD (no rate to count it at)"
        log "the pod's rate is unknown (Runpod's answer gives no cost, and no OVERBRAINER_COST_PER_HOUR): its cost cap cannot be kept"
        return 0
    fi
    if [ -n "$cluster_id" ]; then
        # The cap is the cluster's: every GPU of every node, each node costing this pod's rate.
        cluster_nodes
        if [ -z "$nodes" ]; then
            bad_settings="${bad_settings}${bad_settings:+, }OVERBRAINER_MAX_COST_USD (the cluster's nodes are not known)"
            log "cluster $cluster_id: neither NUM_NODES nor Runpod's answer tells how many nodes it has: its cost cap cannot be kept"
            return 0
        fi
        if [ "$rate" -gt $((1000000000000 / nodes)) ]; then
            bad_settings="${bad_settings}${bad_settings:+, }OVERBRAINER_MAX_COST_USD (a rate beyond a million dollars an hour)"
            log "cluster $cluster_id costs more than a million dollars an hour: its cost cap cannot be counted"
            return 0
        fi
        rate_from="the cluster's $nodes nodes by $nodes_from at $(dollars "$rate")/h each, $rate_from"
        rate=$((rate * nodes))
    fi
    # cap / rate hours, in ms: split so that no product exceeds 63 bits.
    cap_ms=$((cap_micro / rate * 3600000 + cap_micro % rate * 3600000 / rate))
    near_ms=$((cap_ms / 100 * 95 + cap_ms % 100 * 95 / 100))
    log "cost cap $(dollars "$cap_micro") at $(dollars "$rate")/h ($rate_from): near at $(shown "$near_ms"), deleted by $(shown "$cap_ms") after $born_from, counted on the pod"
}

# pod_age: the pod's age when Runpod answered the read in $body and $headers - the Date of
# the answer minus the pod's createdAt, both Runpod's clock - as the monotonic time of the
# pod's creation, in $born; left as it is when the answer does not tell. Of several
# createdAt (an object inside the pod's may have its own), the latest is the pod's:
# anything a pod belongs to was there before it.
pod_age() {
    served=$(sed -n 's/^[Dd][Aa][Tt][Ee]:[[:space:]]*//p' "$headers" 2>/dev/null |
        tr -d '\r' | head -n 1)
    grep -o '"createdAt"[[:space:]]*:[[:space:]]*"[^"]*"' "$body" 2>/dev/null |
        sed 's/^"createdAt"[[:space:]]*:[[:space:]]*"//; s/"$//' >"$work/created"
    made=
    created=
    while IFS= read -r value; do
        if epoch "$value" && { [ -z "$made" ] || [ "$epoch" -gt "$made" ]; }; then
            made=$epoch
            created=$value
        fi
    done <"$work/created"
    now_ms
    if epoch "$served"; then
        served_s=$epoch
        if [ -n "$made" ]; then
            age_ms=$(((served_s - made) * 1000))
            [ "$age_ms" -ge 0 ] || age_ms=0
            born=$((now - age_ms))
            born_from="the pod's creation"
            log "pod $pod_id was created $(shown "$age_ms") before Runpod's answer (createdAt $created, Date $served): deleted by $(shown "$max_ms") after its creation, counted on the pod"
            return
        fi
    fi
    log "Runpod's answer does not tell the pod's age (no createdAt or Date it can read): counting $(shown "$max_ms") from the watchdog's start"
}

# Why the pod has to go now, or nothing; logs each change of what it waits for.
noted=
note() {
    [ "$1" = "$noted" ] && return
    noted=$1
    log "$1"
}

decide() {
    reason=
    now_ms
    failure=${OVERBRAINER_BOOTSTRAP_FAILED:-}
    if [ -z "$failure" ] && [ -f "$pod_dir/bootstrap_failed" ]; then
        failure=$(head -n 1 "$pod_dir/bootstrap_failed" | tr -cd '[:print:]')
        failure=${failure:-no reason given}
    fi
    if [ -n "$failure" ]; then
        reason="the bootstrap failed: $failure"
        return
    fi
    if [ -n "$bad_settings" ]; then
        reason="the watchdog cannot bound this pod: bad settings $bad_settings"
        return
    fi
    if [ "$keep" = 1 ] && [ -f "$run_dir/$JOB_PID" ]; then
        if [ -n "$cap_micro" ]; then
            note "kept (--keep-pod) and its job started: this pod is never deleted by the watchdog, not even at its cost cap ($(dollars "$cap_micro"))"
        else
            note "kept (--keep-pod) and its job started: this pod is never deleted by the watchdog"
        fi
        return
    fi
    if [ $((now - born)) -ge "$max_ms" ]; then
        reason="past the deadline, $(shown "$max_ms") after $born_from"
        return
    fi
    if [ -n "$save_ms" ] && [ $((now - born)) -ge "$save_ms" ]; then
        ask_save deadline "the pod's deadline is $(shown $((max_ms - (now - born)))) away"
    fi
    if [ -n "$cap_ms" ]; then
        if [ $((now - born)) -ge "$cap_ms" ]; then
            reason="cost_cap: the $payer has cost its cap of $(dollars "$cap_micro") at $(dollars "$rate")/h, $(shown "$cap_ms") after $born_from"
            return
        fi
        if [ $((now - born)) -ge "$near_ms" ]; then
            cap_near
        fi
    fi
    if [ -f "$pod_dir/retrieved" ]; then
        reason="the results were retrieved"
        return
    fi
    if [ -f "$run_dir/$EXIT_CODE" ] || [ -f "$run_dir/$CANCELLED" ]; then
        if [ -z "$ended_at" ]; then
            ended_at=$now
        fi
        if [ $((now - ended_at)) -ge "$retrieve_grace_ms" ]; then
            reason="the job ended and its results were not retrieved within $(shown "$retrieve_grace_ms")"
            return
        fi
        note "the job ended: waiting up to $(shown "$retrieve_grace_ms") for its results to be retrieved"
        return
    fi
    if [ -f "$run_dir/$JOB_PID" ]; then
        stall
        [ -n "$reason" ] && return
        note "the job is running"
        return
    fi
    if [ $((now - started)) -ge "$boot_grace_ms" ]; then
        reason="no job started within the boot grace ($(shown "$boot_grace_ms"))"
        return
    fi
    note "waiting up to $(shown "$boot_grace_ms") for the job to start"
}

# The pod has cost 95 % of its cap: the one place that says so, once - a line in the log
# and .pod/cost_cap_near (the amount, the rate, the pod's age in ms), for whatever saves
# the job's work before the cap deletes the pod.
cap_near() {
    left=$(shown $((cap_ms - (now - born))))
    if [ ! -f "$pod_dir/$CAP_NEAR" ]; then
        log "cost_cap_near: the $payer has cost 95 % of its cap of $(dollars "$cap_micro") at $(dollars "$rate")/h; it is deleted $left from now"
        if printf '%s %s %s\n' "$cap_micro" "$rate" $((now - born)) >"$pod_dir/.$CAP_NEAR.tmp" 2>/dev/null &&
            mv -f "$pod_dir/.$CAP_NEAR.tmp" "$pod_dir/$CAP_NEAR"; then
            :
        else
            log "cannot write $pod_dir/$CAP_NEAR"
        fi
    fi
    ask_save cost_cap "the $payer has cost 95 % of its cap; it is deleted $left from now"
}

# ask_save REASON WHY: asks the running job, once, to save a checkpoint and stop - the
# request `train stop` makes, holding REASON (deadline, cost_cap or stall) for the record. Created
# whole (a hard link of a written file, which never replaces one): the job never reads a
# half-written request, and a request already there (`train stop`) is left as it is.
# Nothing is asked of a job that has not started or has ended.
save_asked=
ask_save() {
    [ -z "$save_asked" ] || return 0
    [ -f "$run_dir/$JOB_PID" ] || return 0
    if [ -f "$run_dir/$EXIT_CODE" ] || [ -f "$run_dir/$CANCELLED" ]; then
        return 0
    fi
    save_asked=$1
    if [ -e "$run_dir/$STOP_REQUEST" ]; then
        log "save_requested ($1): $2; the job was already asked to save a checkpoint and stop"
        return 0
    fi
    if printf '%s\n' "$1" >"$run_dir/.$STOP_REQUEST.tmp" 2>/dev/null &&
        ln "$run_dir/.$STOP_REQUEST.tmp" "$run_dir/$STOP_REQUEST" 2>/dev/null; then
        log "save_requested ($1): $2; asked the job to save a checkpoint and stop"
    elif [ -e "$run_dir/$STOP_REQUEST" ]; then
        log "save_requested ($1): $2; the job was already asked to save a checkpoint and stop"
    else
        log "save_requested ($1): $2; cannot write $run_dir/$STOP_REQUEST"
    fi
    rm -f "$run_dir/.$STOP_REQUEST.tmp"
}

# stall: with the stall rule, a running job whose metrics file has not grown for
# stall_ms (before it has grown at all, first_step_ms since the job was seen started) is
# asked to save and stop (`stall`) and, stall_grace_ms later, sets $reason. The file
# growing again ends the stall: the job answered. Spans are on the pod's uptime (now).
job_seen=
metrics_size=
grew_at=
stalled_at=
training_over=
stall() {
    [ -n "$stall_ms" ] || return 0
    size=0
    if [ -f "$run_dir/$METRICS" ]; then
        size=$(wc -c 2>/dev/null <"$run_dir/$METRICS" | tr -cd '0-9')
        size=${size:-0}
    fi
    if [ -z "$job_seen" ]; then
        job_seen=$now
        metrics_size=$size
        # Lines written before the watchdog looked (a restart): counted as written now.
        [ "$size" = 0 ] || grew_at=$now
    elif [ "$size" != "$metrics_size" ]; then
        metrics_size=$size
        grew_at=$now
        # Saving and merging write no line for long: they have the first step's bound.
        if tail -n 1 "$run_dir/$METRICS" 2>/dev/null |
            grep -Eq '"event"[[:space:]]*:[[:space:]]*"(phase|stopped)"'; then
            training_over=1
        fi
        if [ -n "$stalled_at" ]; then
            log "the job wrote a metrics line again: no longer stalled"
            stalled_at=
        fi
    fi
    if [ -z "$grew_at" ]; then
        since=$job_seen
        allowed=$first_step_ms
        silence="no metrics line in the $(shown $((now - since))) since the job started"
    else
        since=$grew_at
        allowed=$stall_ms
        [ -z "$training_over" ] || allowed=$first_step_ms
        silence="no new metrics line for $(shown $((now - since)))"
    fi
    [ $((now - since)) -ge "$allowed" ] || return 0
    if [ -z "$stalled_at" ]; then
        stalled_at=$now
        log "stall: $silence (bound $(shown "$allowed")); the pod is deleted $(shown "$stall_grace_ms") from now unless the job writes again"
        ask_save stall "the job wrote $silence"
    fi
    if [ $((now - stalled_at)) -ge "$stall_grace_ms" ]; then
        reason="stall: the job wrote $silence and did not stop within $(shown "$stall_grace_ms") of the request to save and stop"
    fi
}

# One attempt at ending the pod: delete, else terminate, else stop; a cluster's node ends
# its cluster instead.
end_pod() {
    if [ -n "$cluster_id" ]; then
        end_cluster "$1"
        return
    fi
    log "deleting pod $pod_id: $1"
    api DELETE "/pods/$pod_id"
    case $code in
    200 | 202 | 204)
        log "pod $pod_id deleted ($(answer))"
        return
        ;;
    esac
    if gone; then
        log "pod $pod_id is gone (HTTP 404)"
        finish 0
    fi
    # A cluster's member the first read did not see as one (Runpod was unreachable then):
    # Runpod refuses to delete it alone, and its answer names the cluster to delete.
    if [ "$code" = 409 ] && joined; then
        end_cluster "$1"
        return
    fi
    log "delete failed ($(answer)); trying the terminate action"
    for action in terminate stop; do
        api POST "/pods/$pod_id/action" "{\"action\":\"$action\"}"
        case $code in
        200 | 202 | 204)
            if [ "$action" = stop ]; then
                log "pod $pod_id stopped ($(answer)); its disk still bills: deleting it again at the next check"
            else
                log "pod $pod_id terminated ($(answer))"
            fi
            return
            ;;
        esac
        if gone; then
            log "pod $pod_id is gone (HTTP 404)"
            finish 0
        fi
        if [ "$action" = terminate ]; then
            log "terminate failed ($(answer)); trying the stop action"
        else
            log "stop failed ($(answer)); trying again at the next check in ${interval}s"
        fi
    done
}

# joined: reads the pod again; 0 when Runpod's answer names the cluster it belongs to (in
# $cluster_id from then on).
joined() {
    log "delete refused ($(answer)): reading pod $pod_id again for the cluster it may belong to"
    api GET "/pods/$pod_id"
    [ "$code" = 200 ] && grep -q "\"$pod_id\"" "$body" 2>/dev/null && membership &&
        [ -n "$cluster_id" ]
}

# One attempt at ending the cluster this pod belongs to, and so every member: the pod
# endpoints refuse a member (409) and there is nothing else to fall back to. A 404 in
# Runpod's error shape means the cluster is gone, and the watchdog ends.
end_cluster() {
    log "deleting cluster $cluster_id (every node, pod $pod_id among them): $1"
    api DELETE "/clusters/$cluster_id"
    case $code in
    200 | 202 | 204)
        log "cluster $cluster_id deleted ($(answer))"
        return
        ;;
    esac
    if gone; then
        log "cluster $cluster_id is gone (HTTP 404)"
        finish 0
    fi
    log "deleting cluster $cluster_id failed ($(answer)); trying again at the next check in ${interval}s"
}

now_ms
started=$now
# Until Runpod's answer tells the pod's age, the deadline counts from here.
born=$started
born_from="the watchdog started"
ended_at=
log "guarding pod ${pod_id:-(unknown)} of run ${OVERBRAINER_RUN:-(unknown)} (check every ${interval}s)"
if [ -n "$save_ms" ]; then
    log "the job is asked to save a checkpoint and stop $(shown $((max_ms - save_ms))) before the deadline"
elif [ -n "$save_note" ]; then
    log "$save_note"
fi
if [ -n "$stall_ms" ]; then
    log "a running job whose metrics file has not grown for $(shown "$stall_ms") ($(shown "$first_step_ms") before its first line) is stalled: asked to save and stop, the pod deleted $(shown "$stall_grace_ms") later"
fi
if [ -n "$stall_note" ]; then
    log "$stall_note"
fi
if ! prove_key; then
    # Without a usable key (or curl) nothing here can delete the pod; overbrainer reads the
    # verdict and deletes it. Stay up so that the container (and the verdict) stays readable.
    log "cannot guard this pod; overbrainer deletes it"
    while :; do pause 3600; done
fi
while :; do
    decide
    if [ -n "$reason" ]; then
        noted=
        end_pod "$reason"
    fi
    pause "$interval"
done
