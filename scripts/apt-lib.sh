# Sourced by the scripts that install with apt (start-rabbitmq4.sh: debootstrap on the host,
# rabbitmq-server in its chroot; ensure-rabbitmq.sh: rabbitmq-server on the host).
# scripts/test.sh starts several of them at once, and a new machine may still run its own apt
# (the image's start-up upgrade): the host's apt holds one lock, and finding it taken is a
# reason to wait, never a reason to say "this machine cannot".
#
#   apt_install LOG PACKAGE...   installs the packages with the host's apt-get unless each is
#                                installed already (then no apt call at all), serialized with
#                                every other apt_install on the machine
#   apt_retry LOG COMMAND...     runs an apt command (apt-get update/install, debootstrap),
#                                appending to LOG, again while it fails for a transient reason
#
# Both return
#   0  done
#   5  transient: apt's lock was still held after RTROUTE_APT_WAIT_S (default 900 s), or our
#      own lock was (another of our scripts installing)
#   4  the mirror could not be reached on any of 3 tries (a download or a name lookup failed)
#   1  apt refused for another reason (no such package, a broken dpkg state): see LOG
#
# Our own lock is flock on $RTROUTE_APT_LOCK (default /var/lock/rtroute-apt.lock): our scripts
# queue behind each other instead of racing for apt's. apt's own locks (lists, archives, dpkg
# frontend), which any other apt on the machine may hold, are waited for by retrying while apt
# says so, with a growing pause.

APT_WAIT_S=${RTROUTE_APT_WAIT_S:-900}
APT_LOCK=${RTROUTE_APT_LOCK:-/var/lock/rtroute-apt.lock}
APT_FETCH_TRIES=3

# apt_installed PACKAGE: dpkg says it is installed
apt_installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

# apt_failure LOG: why the last command failed, from what it wrote: lock, fetch or other
apt_failure() {
    local tail_text
    tail_text=$(tail -n 40 "$1")
    if grep -Eq 'Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock|is another process using it' <<<"$tail_text"; then
        echo lock
    elif grep -Eq 'Failed to fetch|Temporary failure resolving|Unable to fetch some archives|Hash Sum mismatch|Connection timed out|Couldn.t download|Failed getting release file|Could not resolve|Connection failed' <<<"$tail_text"; then
        echo fetch
    else
        echo other
    fi
}

apt_retry() {
    local log=$1 started=$SECONDS delay=2 fetch_failures=0
    shift
    while :; do
        # fds 8 and 9 are our locks: a daemon an install starts must not inherit them
        "$@" >>"$log" 2>&1 8>&- 9>&- && return 0
        case $(apt_failure "$log") in
            lock)
                if [ $((SECONDS - started)) -ge "$APT_WAIT_S" ]; then
                    echo "rtroute: apt's lock still held after ${APT_WAIT_S} s" >>"$log"
                    return 5
                fi
                echo "rtroute: apt's lock is held by another apt: waiting ${delay} s" >>"$log" ;;
            fetch)
                fetch_failures=$((fetch_failures + 1))
                if [ $fetch_failures -ge $APT_FETCH_TRIES ]; then
                    echo "rtroute: the mirror could not be reached on $APT_FETCH_TRIES tries" >>"$log"
                    return 4
                fi
                echo "rtroute: a download failed: trying again in ${delay} s" >>"$log" ;;
            *) return 1 ;;
        esac
        sleep "$delay"
        [ $delay -ge 30 ] || delay=$((delay * 2))
    done
}

apt_install() {
    local log=$1 p missing=()
    shift
    for p in "$@"; do apt_installed "$p" || missing+=("$p"); done
    [ ${#missing[@]} -gt 0 ] || return 0
    mkdir -p "$(dirname "$APT_LOCK")"
    (
        flock -w "$APT_WAIT_S" 9 || {
            echo "rtroute: $APT_LOCK still held after ${APT_WAIT_S} s" >>"$log"
            exit 5
        }
        # whoever queued behind another install may find the packages there now
        still=()
        for p in "${missing[@]}"; do apt_installed "$p" || still+=("$p"); done
        [ ${#still[@]} -gt 0 ] || exit 0
        apt_retry "$log" apt-get update -qq || exit $?
        apt_retry "$log" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${still[@]}"
    ) 9>>"$APT_LOCK"
}
