# overbrainer preflight probes: POSIX sh, the same under sh, dash and busybox sh. Cheap on
# purpose: nothing here imports a trainer or pulls an image.
#
#   sh probe.sh trainer PROGRAM   PROGRAM (a path, or a name looked up on PATH): does it exist,
#                                 can it run, and does the interpreter of its #! line start?
#   sh probe.sh engine ENGINE     does the container engine (docker or podman) answer?
#   sh probe.sh gpus              how many GPUs does nvidia-smi list (status=unknown: none)?
#
# Output: key=value lines (status=..., path=..., interpreter=..., version=...), then, for a
# failure, a line "--" and the failing command's output.

_ob_say() {
    printf '%s=%s\n' "$1" "$2"
}

_ob_fail() {
    # $1: status; stdin: what the failing command said
    _ob_say status "$1"
    printf '%s\n' --
    head -c 2000
    exit 0
}

_ob_trainer() {
    _ob_want=$1
    case $_ob_want in
    */*) _ob_path=$_ob_want ;;
    *) _ob_path=$(command -v -- "$_ob_want" 2>/dev/null) || _ob_path= ;;
    esac
    _ob_say path "$_ob_path"
    if [ -z "$_ob_path" ] || [ ! -e "$_ob_path" ]; then
        _ob_say status missing
        exit 0
    fi
    if [ -d "$_ob_path" ] || [ ! -x "$_ob_path" ]; then
        _ob_say status not_executable
        exit 0
    fi
    # The #! line, if any (a compiled program has none: nothing more to start).
    _ob_line=$(dd if="$_ob_path" bs=256 count=1 2>/dev/null | tr -d '\000' | head -n 1)
    case $_ob_line in
    '#!'*) ;;
    *)
        _ob_say status ok
        exit 0
        ;;
    esac
    set -f
    # shellcheck disable=SC2086 # the #! line is split into words, as the kernel does
    set -- ${_ob_line#??}
    set +f
    _ob_say interpreter "$1"
    if [ ! -f "$1" ] || [ ! -x "$1" ]; then
        _ob_say status no_interpreter
        exit 0
    fi
    # The program the #! line starts: through env, its first word that is not an option.
    _ob_prog=$1
    if [ "${1##*/}" = env ]; then
        for _ob_word in "$@"; do
            case $_ob_word in
            "$1" | -*) ;;
            *)
                _ob_prog=$_ob_word
                break
                ;;
            esac
        done
        _ob_say program "$_ob_prog"
        if ! command -v -- "$_ob_prog" >/dev/null 2>&1; then
            _ob_say status no_interpreter
            exit 0
        fi
    fi
    # Start it, doing nothing, if it is a shell or a Python (both take -c): a venv whose
    # Python moved or lost its libraries fails here, in a fraction of a second.
    case ${_ob_prog##*/} in
    python* | sh | bash | dash | busybox) ;;
    *)
        _ob_say status ok
        exit 0
        ;;
    esac
    if _ob_out=$("$@" -c '' </dev/null 2>&1); then
        _ob_say status ok
    else
        printf '%s\n' "$_ob_out" | _ob_fail interpreter_failed
    fi
}

_ob_engine() {
    _ob_engine=$1
    if ! command -v -- "$_ob_engine" >/dev/null 2>&1; then
        _ob_say status missing
        exit 0
    fi
    _ob_say path "$(command -v -- "$_ob_engine")"
    case $_ob_engine in
    podman) _ob_format='{{.Version.Version}}' && set -- podman info --format ;;
    *) _ob_format='{{.Server.Version}}' && set -- "$_ob_engine" version --format ;;
    esac
    if _ob_out=$("$@" "$_ob_format" </dev/null 2>&1); then
        _ob_say version "$(printf '%s\n' "$_ob_out" | head -n 1)"
        _ob_say status ok
    else
        printf '%s\n' "$_ob_out" | _ob_fail no_answer
    fi
}

_ob_gpus() {
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        _ob_say status unknown
        exit 0
    fi
    if _ob_out=$(nvidia-smi -L </dev/null 2>&1); then
        _ob_say count "$(printf '%s\n' "$_ob_out" | grep -c '^GPU ')"
        _ob_say status ok
    else
        printf '%s\n' "$_ob_out" | _ob_fail no_answer
    fi
}

case ${1-} in
trainer) _ob_trainer "${2-}" ;;
engine) _ob_engine "${2-}" ;;
gpus) _ob_gpus ;;
*)
    echo "usage: sh probe.sh trainer PROGRAM | engine ENGINE | gpus" >&2
    exit 2
    ;;
esac
