#!/bin/sh
# overbrainer pod bootstrap: the container's startup work (POSIX sh).
#
# Installs the pod's pinned SSH host key and the run's client key, writes the job's
# environment file, starts sshd, then hands over to the watchdog with `exec`. A step that
# fails records why in $OVERBRAINER_RUN_DIR/.pod/bootstrap_failed (and in
# OVERBRAINER_BOOTSTRAP_FAILED for the watchdog) and still hands over: the watchdog then
# deletes the pod at once. Nothing secret is ever printed.
#
# Environment, from the pod's create call (the host key is the only secret in it):
#   OVERBRAINER_RUN             the run ID (the run marker)
#   OVERBRAINER_RUN_DIR         the run's directory on the pod: absolute, or relative to $HOME
#   OVERBRAINER_HOST_KEY_B64    the pod's SSH host private key (OpenSSH format), base64
#   OVERBRAINER_AUTHORIZED_KEY  the run's client public key: one ssh-ed25519 line
#   OVERBRAINER_HF_HOME         HF_HOME for the job (default: the image's, else ~/.cache)
#   OVERBRAINER_VOLUME_LINKS    links from the run's directory into the network volume:
#                               PATH=TARGET words (TARGET absolute; ending in / a directory,
#                               made if missing)
#   NCCL_SOCKET_IFNAME          on a cluster's node, the job's interface for NCCL (ens1)
# From Runpod, on a cluster's node only: PRIMARY_ADDR, PRIMARY_PORT, NODE_RANK, NUM_NODES,
# NUM_TRAINERS, WORLD_SIZE and the like, written to the job's environment with
# NCCL_SOCKET_IFNAME.
# For tests (defaults are what a pod uses):
#   OVERBRAINER_ROOT            prefix of the system paths (etc/ssh, root/.ssh, run)
#   OVERBRAINER_SSHD            the sshd command (/usr/sbin/sshd)
#   OVERBRAINER_SSHD_WAIT       seconds to wait for sshd's pid file (15)
#   OVERBRAINER_SSH_USER        the only user sshd lets in (root)
#   OVERBRAINER_WATCHDOG        the watchdog script (watchdog.sh beside this script)
#   OVERBRAINER_SHELL           the shell that runs the watchdog (sh)

umask 022
root=${OVERBRAINER_ROOT:-}
failed=

say() {
    printf '%s bootstrap: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"
}

# Hands the pod over to the watchdog; it is the container's main process from then on.
handover() {
    # The watchdog needs none of these; the host key must not outlive this script.
    unset OVERBRAINER_HOST_KEY_B64 OVERBRAINER_BOOTSTRAP_SH OVERBRAINER_WATCHDOG_SH
    OVERBRAINER_RUN_DIR=$run_dir
    OVERBRAINER_BOOTSTRAP_FAILED=$failed
    export OVERBRAINER_RUN_DIR OVERBRAINER_BOOTSTRAP_FAILED
    watchdog=${OVERBRAINER_WATCHDOG:-$(dirname -- "$0")/watchdog.sh}
    if [ ! -r "$watchdog" ]; then
        say "no watchdog script at $watchdog: nothing guards this pod; stopping the container"
        exit 1
    fi
    say "starting the watchdog"
    # Word splitting is wanted: the shell may be given as e.g. `busybox sh`.
    # shellcheck disable=SC2086
    exec ${OVERBRAINER_SHELL:-sh} "$watchdog"
}

# Records why the bootstrap failed, then hands over (the watchdog deletes the pod).
fail() {
    failed=$1
    say "failed: $1"
    if mkdir -p "$pod_dir" 2>/dev/null &&
        printf '%s\n' "$1" >"$pod_dir/.bootstrap_failed.tmp" 2>/dev/null &&
        mv -f "$pod_dir/.bootstrap_failed.tmp" "$pod_dir/bootstrap_failed"; then
        :
    else
        say "cannot record the failure in $pod_dir/bootstrap_failed"
    fi
    handover
}

# Writes `export NAME='value'` with the value single-quoted for sh.
env_line() {
    printf "export %s='%s'\n" "$1" "$(printf '%s' "$2" | sed "s/'/'\\\\''/g")"
}

run_dir=${OVERBRAINER_RUN_DIR:-}
case $run_dir in
/*) ;;
'' | -* | *..*)
    # Somewhere to record the failure that the watchdog also looks at.
    run_dir=$root/tmp/overbrainer-run
    pod_dir=$run_dir/.pod
    fail "OVERBRAINER_RUN_DIR is not set, or not a plain path"
    ;;
*) run_dir=${HOME:-/root}/$run_dir ;;
esac
pod_dir=$run_dir/.pod
say "run ${OVERBRAINER_RUN:-(unknown)}: preparing the pod"

mkdir -p "$pod_dir" || fail "cannot create $pod_dir"
# Left by an earlier start of this container: this start decides afresh.
rm -f "$pod_dir/bootstrap_failed" "$pod_dir/watchdog" || fail "cannot clear $pod_dir"

# 1. Inputs.
[ -n "${OVERBRAINER_HOST_KEY_B64:-}" ] || fail "no host key: OVERBRAINER_HOST_KEY_B64 is not set"
authorized=${OVERBRAINER_AUTHORIZED_KEY:-}
[ -n "$authorized" ] || fail "no client key: OVERBRAINER_AUTHORIZED_KEY is not set"
case $authorized in
*[!A-Za-z0-9+/=\ ._@:-]*) fail "OVERBRAINER_AUTHORIZED_KEY is not one ssh-ed25519 public key" ;;
"ssh-ed25519 AAAA"*) ;;
*) fail "OVERBRAINER_AUTHORIZED_KEY is not one ssh-ed25519 public key" ;;
esac

# 2. The pinned host key, alone: the image's own host keys are removed, never offered.
ssh_etc=$root/etc/ssh
host_key=$ssh_etc/overbrainer_host_ed25519_key
mkdir -p "$ssh_etc" || fail "cannot create $ssh_etc"
rm -f "$ssh_etc"/ssh_host_* || fail "cannot remove the image's host keys from $ssh_etc"
(
    umask 077
    printf '%s' "$OVERBRAINER_HOST_KEY_B64" | base64 -d >"$host_key.tmp" 2>/dev/null
) || fail "OVERBRAINER_HOST_KEY_B64 is not valid base64"
chmod 600 "$host_key.tmp" || fail "cannot set the mode of $host_key.tmp"
[ "$(head -n 1 "$host_key.tmp")" = "-----BEGIN OPENSSH PRIVATE KEY-----" ] ||
    fail "OVERBRAINER_HOST_KEY_B64 does not hold an OpenSSH private key"
mv -f "$host_key.tmp" "$host_key" || fail "cannot install the host key at $host_key"
say "host key installed"

# 3. The run's client key, and no other, may log in.
ssh_home=$root/root/.ssh
authorized_keys=$ssh_home/authorized_keys
(umask 077 && mkdir -p "$ssh_home") || fail "cannot create $ssh_home"
chmod 700 "$ssh_home" || fail "cannot set the mode of $ssh_home"
(
    umask 077
    printf '%s\n' "$authorized" >"$authorized_keys.tmp"
) || fail "cannot write $authorized_keys"
mv -f "$authorized_keys.tmp" "$authorized_keys" || fail "cannot write $authorized_keys"
say "client key authorized"

# 4. The job's environment: what an SSH session would not get from the image.
libs=${LD_LIBRARY_PATH:-}
if [ -z "$libs" ] && [ -d /usr/local/cuda/lib64 ]; then
    libs=/usr/local/cuda/lib64
fi
# A cluster's node: Runpod sets the cluster's variables in the container's environment
# only, and the job (torchrun's static rendezvous) needs them. A single pod has none.
member=
if [ -n "${PRIMARY_ADDR:-}" ] && [ -n "${NUM_NODES:-}" ]; then
    member=1
fi
cluster_lines() {
    for name in PRIMARY_ADDR PRIMARY_PORT MASTER_ADDR MASTER_PORT NODE_ADDR NODE_RANK \
        NUM_NODES NUM_TRAINERS HOST_NODE_ADDR WORLD_SIZE; do
        # The names are the fixed words above: eval only reads the variable.
        eval "given=\${$name+set} value=\${$name-}"
        [ -z "$given" ] || env_line "$name" "$value" || return 1
    done
    # Inter-node traffic must use ens1 (eth0's addresses time out), unless the create said
    # otherwise.
    env_line NCCL_SOCKET_IFNAME "${NCCL_SOCKET_IFNAME:-ens1}"
}
{
    env_line PATH "$PATH" &&
        env_line LD_LIBRARY_PATH "$libs" &&
        if [ -n "${CUDA_HOME:-}" ]; then env_line CUDA_HOME "$CUDA_HOME"; fi &&
        env_line HF_HOME "${OVERBRAINER_HF_HOME:-${HF_HOME:-/root/.cache/huggingface}}" &&
        if [ -n "$member" ]; then cluster_lines; fi
} >"$pod_dir/job.env.tmp" && mv -f "$pod_dir/job.env.tmp" "$pod_dir/job.env" ||
    fail "cannot write $pod_dir/job.env"
if [ -n "$member" ]; then
    say "job environment written (cluster node ${NODE_RANK:-?} of $NUM_NODES)"
else
    say "job environment written"
fi

# 4b. The run's files that live on the network volume (the data from home, by content):
# the run's directory links to them before anything is uploaded to it.
for link in ${OVERBRAINER_VOLUME_LINKS:-}; do
    path=${link%%=*}
    to=${link#*=}
    case $path in
    '' | /* | -* | *..* | *[!A-Za-z0-9._/+-]*) fail "OVERBRAINER_VOLUME_LINKS: not a plain path: $path" ;;
    esac
    case $to in
    /*[!/]*) ;;
    *) fail "OVERBRAINER_VOLUME_LINKS: not an absolute path: $to" ;;
    esac
    case $to in
    *..* | *[!A-Za-z0-9._/+-]*) fail "OVERBRAINER_VOLUME_LINKS: not a plain path: $to" ;;
    */)
        to=${to%/}
        mkdir -p "$root$to" || fail "cannot create $to on the network volume"
        ;;
    esac
    mkdir -p "$(dirname -- "$run_dir/$path")" && ln -sfn "$root$to" "$run_dir/$path" ||
        fail "cannot link $path to $to"
    say "linked $path to $to"
done

# 5. sshd, with a configuration of ours only.
config=$ssh_etc/overbrainer_sshd_config
pid_file=$root/run/overbrainer-sshd.pid
user=${OVERBRAINER_SSH_USER:-root}
mkdir -p "$root/run/sshd" || fail "cannot create $root/run/sshd"
cat >"$config.tmp" <<EOF || fail "cannot write $config"
# Written by overbrainer's bootstrap for run ${OVERBRAINER_RUN:-}.
Port 22
HostKey $host_key
AuthorizedKeysFile $authorized_keys
PidFile $pid_file
AllowUsers $user
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM yes
PermitUserEnvironment no
AllowAgentForwarding no
AllowTcpForwarding no
X11Forwarding no
PermitTunnel no
ClientAliveInterval 30
ClientAliveCountMax 4
Subsystem sftp internal-sftp
EOF
mv -f "$config.tmp" "$config" || fail "cannot write $config"

# An sshd the image may have started offers the image's host keys: it has to go.
for old in "$root/run/sshd.pid" "$root/var/run/sshd.pid"; do
    [ -f "$old" ] || continue
    pid=$(head -n 1 "$old")
    case $pid in
    '' | *[!0-9]* | 0 | 1) ;;
    *) kill "$pid" 2>/dev/null && say "stopped the image's sshd (pid $pid)" ;;
    esac
done

sshd=${OVERBRAINER_SSHD:-/usr/sbin/sshd}
rm -f "$pid_file"
# shellcheck disable=SC2086
$sshd -t -f "$config" >/dev/null 2>&1 || fail "sshd refuses its configuration ($sshd -t)"
# shellcheck disable=SC2086
$sshd -f "$config" </dev/null >/dev/null 2>&1
status=$?
[ "$status" -eq 0 ] || fail "sshd did not start (exit status $status)"
waited=0
wait_for=${OVERBRAINER_SSHD_WAIT:-15}
until [ -s "$pid_file" ]; do
    [ "$waited" -lt "$wait_for" ] || fail "sshd did not start listening within ${wait_for}s"
    sleep 1
    waited=$((waited + 1))
done
say "sshd started"

handover
