#!/bin/bash
#
# Soft-RoCE lab: real rxe verbs devices in QEMU VMs (TCG, no KVM, no RDMA
# hardware) that run the host's own binaries from a read-only 9p root.
#
#   lab.sh prepare [--refresh]          fetch the Debian kernel, build the initramfs (cached)
#   lab.sh up one|two|fabric [--forward GUESTPORT]...
#                                       boot the VMs and wait until they are ready; fabric:
#                                       VMs A-D, A and B on switch leaf1, C and D on leaf2
#   lab.sh exec [OPTIONS] A|B -- CMD... run CMD in a VM; its output and exit status
#   lab.sh spawn [OPTIONS] A|B -- CMD...
#                                       start CMD in the background in a VM; prints its job name
#       OPTIONS: --timeout SECS (exec: 300, spawn: none; 0 = none)  --cwd DIR (default: $PWD)
#                --env NAME=VALUE  --name JOB (spawn)  --background (exec = spawn)
#       exec exits with CMD's status, 124 on timeout, 125 when the lab fails.
#   lab.sh jobs A|B                     list the jobs of a VM
#   lab.sh wait [--timeout SECS] A|B JOB
#                                       wait for a job, print its output, return its status
#   lab.sh output [--stderr] A|B JOB    print a job's output so far
#   lab.sh kill A|B JOB                 stop a job (SIGTERM, then SIGKILL); its output stays
#   lab.sh port A|B GUESTPORT           host port forwarded to GUESTPORT of the VM
#   lab.sh addr A|B                     the VM's RDMA address (10.99.0.x)
#   lab.sh gid A|B                      rxe0's RoCE v2 GID index for that address
#   lab.sh link A|B [up|down]           cut (down) or restore (up) a VM's cable to the lab
#                                       link, as a pulled cable; no argument: print its state
#   lab.sh nic A|B                      QEMU's side of the VM's lab NIC: netdev, virtqueue indices
#   lab.sh trunk [up|down]              fabric: cut or restore the link between the switches
#   lab.sh console A|B                  the VM's console log
#   lab.sh reset                        end every job in every VM and forget them all (the
#                                       lab as booted, for the next user of a shared lab)
#   lab.sh status                       state of the lab (exit 0 up, 3 down)
#   lab.sh down                         stop the VMs and remove the runtime state
#
# See README.md beside this script.

set -euo pipefail

LAB_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
readonly LAB_DIR
readonly SELF=$LAB_DIR/${BASH_SOURCE[0]##*/}
readonly CACHE_DIR=${IBPROBE_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ibprobe-lab}
readonly STATE_DIR=${IBPROBE_LAB_STATE:-${TMPDIR:-/tmp}/ibprobe-lab}
readonly RUN_DIR=$STATE_DIR/run
readonly LOG_DIR=$STATE_DIR/logs

readonly VM_MEM_MB=${IBPROBE_LAB_MEM:-1024}
# Four VMs share the host; the exporter and the tools need far less.
readonly FABRIC_VM_MEM_MB=${IBPROBE_LAB_MEM:-512}
readonly FABRIC_HOSTS=(A B C D)
# Without ERMS and FSRM the guest's kernel and glibc copy with rep movsq or vector moves instead of
# rep movsb, which TCG runs a byte at a time: ib_write_bw with 64 KiB messages moves 30 MB/s
# between two VMs instead of 18.
readonly VM_CPU=${IBPROBE_LAB_CPU:-max,-erms,-fsrm}
readonly BOOT_TIMEOUT=${IBPROBE_LAB_BOOT_TIMEOUT:-150}
readonly EXEC_TIMEOUT_DEFAULT=300
readonly PICKUP_TIMEOUT=30    # seconds for the VM agent to start a job
readonly EXEC_GRACE=15        # seconds past a job timeout before the VM counts as hung
readonly PORT_BASE=${IBPROBE_LAB_PORT_BASE:-17470}

readonly LAB_MODULES=(rdma_rxe ib_umad ib_uverbs rdma_ucm 9pnet_virtio 9p virtio_pci
    virtio_net virtio_console veth dummy crc32_generic sch_netem)
readonly LAB_HOST_PACKAGES=(qemu-system-x86 busybox-static kmod cpio iproute2)
readonly LAB_GUEST_TOOL_PACKAGES=(rdma-core ibverbs-providers ibverbs-utils perftest ethtool)

# Exit statuses of exec/wait besides the command's own.
readonly RC_TIMEOUT=124
readonly RC_LAB_FAILURE=125

# ---------------------------------------------------------------------------
# helpers

say() { printf 'lab: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

# Temporary paths removed when the script exits, however it exits.
CLEANUP_PATHS=()
cleanup() { ((${#CLEANUP_PATHS[@]} == 0)) || rm -rf "${CLEANUP_PATHS[@]}"; }
trap cleanup EXIT

usage() { # [EXIT_STATUS]
    sed -n '3,/^# See README/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
    exit "${1:-2}"
}

now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }

elapsed_s() { # START_MS
    local ms=$(($(now_ms) - $1))
    printf '%d.%01d' $((ms / 1000)) $((ms % 1000 / 100))
}

validate_host() {
    [[ $1 == A || $1 == B ]] && return 0
    [[ $1 == C || $1 == D ]] && fabric_lab && return 0
    die "unknown VM '$1' (expected A or B)"
}

fabric_lab() { [[ -r $RUN_DIR/mode && $(<"$RUN_DIR/mode") == fabric ]]; }

vm_dir() { echo "$RUN_DIR/$1"; }
xchg_dir() { echo "$RUN_DIR/$1/xchg"; }
console_log() { echo "$LOG_DIR/$1.console.log"; }

vm_pid() { # HOST -> pid of its qemu if it is running
    local pidfile pid
    pidfile=$(vm_dir "$1")/qemu.pid
    [[ -r $pidfile ]] || return 1
    read -r pid <"$pidfile" || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    # Guard against a recycled pid: the process must be this lab's qemu.
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$RUN_DIR/$1/" || return 1
    echo "$pid"
}

vm_running() { vm_pid "$1" >/dev/null; }

lab_hosts() { # hosts of the running (or last started) lab
    local mode=
    [[ -r $RUN_DIR/mode ]] && read -r mode <"$RUN_DIR/mode"
    case $mode in
        one) echo A ;;
        two) echo A B ;;
        fabric) echo "${FABRIC_HOSTS[*]}" ;;
        *) return 1 ;;
    esac
}

console_tail() { # HOST [LINES]
    local log
    log=$(console_log "$1")
    if [[ ! -s $log ]]; then
        echo "(console log $log is empty)" >&2
        return 0
    fi
    echo "---- last ${2:-25} lines of $log ----" >&2
    tail -n "${2:-25}" "$log" | tr -d '\r' >&2
    echo "----" >&2
}

require_vm() { # HOST
    validate_host "$1"
    vm_running "$1" && return 0
    if [[ -e $(vm_dir "$1")/qemu.pid ]]; then
        say "error: VM $1 has stopped"
        console_tail "$1" 10
    else
        say "error: VM $1 is not running (lab.sh up first; state $STATE_DIR)"
    fi
    exit "$RC_LAB_FAILURE"
}

# ---------------------------------------------------------------------------
# prepare

lab_install_deps() {
    local missing=() pkg
    for pkg in "${LAB_HOST_PACKAGES[@]}" "${LAB_GUEST_TOOL_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return 0
    if ((EUID != 0)); then
        die "missing packages: ${missing[*]} (run as root, or: apt-get install ${missing[*]})"
    fi
    say "installing ${missing[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
        apt-get update >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 \
            || die "apt-get install ${missing[*]} failed"
    fi
}

# The ABI (e.g. 6.1.0-57-amd64) of Debian's current generic kernel.
resolve_kernel_abi() {
    if [[ -n ${IBPROBE_LAB_KERNEL_ABI:-} ]]; then
        echo "$IBPROBE_LAB_KERNEL_ABI"
        return 0
    fi
    local dep
    dep=$(apt-cache depends linux-image-amd64 2>/dev/null \
        | sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*-amd64\)\(-unsigned\)\{0,1\}$/\1/p' | head -n1)
    [[ -n $dep ]] || return 1
    echo "$dep"
}

apt_download() { # PACKAGE DESTDIR
    local -a opts=()
    # apt drops to the _apt user for downloads; a root-owned cache dir is not
    # writable for it.
    ((EUID == 0)) && opts=(-o APT::Sandbox::User=root)
    (cd "$2" && apt-get "${opts[@]}" download "$1" >&2)
}

download_kernel_deb() { # ABI -> path of the .deb
    local abi=$1 pkg="linux-image-$1-unsigned" debdir=$CACHE_DIR/debs deb
    mkdir -p "$debdir"
    deb=$(compgen -G "$debdir/${pkg}_*_amd64.deb" | head -n1) || true
    if [[ -z $deb ]]; then
        say "downloading $pkg"
        if ! apt_download "$pkg" "$debdir"; then
            ((EUID == 0)) || die "apt-get download $pkg failed"
            say "apt-get download failed; refreshing the package lists"
            apt-get update >&2 || die "apt-get update failed"
            apt_download "$pkg" "$debdir" || die "apt-get download $pkg failed"
        fi
        deb=$(compgen -G "$debdir/${pkg}_*_amd64.deb" | head -n1) || die "$pkg: no .deb after download"
    fi
    echo "$deb"
}

busybox_binary() {
    local bb
    bb=$(command -v busybox) || die "busybox not found (apt-get install busybox-static)"
    if ldd "$bb" >/dev/null 2>&1; then
        die "$bb is dynamically linked; the initramfs needs busybox-static"
    fi
    echo "$bb"
}

# Everything the initramfs is built from; a change rebuilds it.
initramfs_key() { # ABI
    {
        echo "abi=$1"
        echo "modules=${LAB_MODULES[*]}"
        sha256sum "$LAB_DIR/guest-init.sh" "$(busybox_binary)" | cut -d' ' -f1
    } | sha256sum | cut -d' ' -f1
}

# modprobe wants ROOT/lib/modules/VER; newer packages ship usr/lib/modules.
module_root() { # EXTRACTED_PKG ABI
    if [[ ! -d $1/lib/modules/$2 && -d $1/usr/lib/modules/$2 ]]; then
        mkdir -p "$1/lib"
        ln -s ../usr/lib/modules "$1/lib/modules"
    fi
    [[ -d $1/lib/modules/$2 ]] || die "kernel package has no modules for $2"
    echo "$1"
}

copy_module() { # SRC.ko[.xz|.zst|.gz] DESTDIR -> basename.ko
    local src=$1 name
    name=$(basename "$src")
    case $src in
        *.ko) cp "$src" "$2/$name" ;;
        *.ko.xz) name=${name%.xz} && xz -dc "$src" >"$2/$name" ;;
        *.ko.zst) name=${name%.zst} && zstd -qdc "$src" >"$2/$name" ;;
        *.ko.gz) name=${name%.gz} && gzip -dc "$src" >"$2/$name" ;;
        *) die "unexpected module file $src" ;;
    esac
    echo "$name"
}

build_initramfs() { # ABI DEB OUTDIR
    local abi=$1 deb=$2 out=$3 work pkg root mod line ko params name
    work=$(mktemp -d "$CACHE_DIR/build.XXXXXX")
    CLEANUP_PATHS+=("$work")
    pkg=$work/pkg
    say "extracting $(basename "$deb")"
    dpkg-deb -x "$deb" "$pkg"
    root=$(module_root "$pkg" "$abi")
    depmod -b "$root" "$abi"

    local initrd=$work/initrd
    mkdir -p "$initrd"/{bin,etc/lab,lib/modules,proc,sys,dev,newroot}
    local -A seen=()
    : >"$initrd/etc/lab/modules"
    for mod in "${LAB_MODULES[@]}"; do
        local deps
        deps=$(modprobe -d "$root" -S "$abi" --show-depends "$mod" 2>&1) \
            || die "kernel $abi lacks module $mod: $deps"
        while read -r line; do
            case $line in
                builtin\ *) continue ;;
                insmod\ *) ;;
                *) die "unexpected modprobe output for $mod: $line" ;;
            esac
            line=${line#insmod }
            ko=${line%% *}
            params=
            [[ $line == *' '* ]] && params=${line#* }
            [[ -n ${seen[$ko]:-} ]] && continue
            seen[$ko]=1
            name=$(copy_module "$ko" "$initrd/lib/modules")
            echo "$name $params" >>"$initrd/etc/lab/modules"
        done <<<"$deps"
    done
    cp "$(busybox_binary)" "$initrd/bin/busybox"
    install -m 0755 "$LAB_DIR/guest-init.sh" "$initrd/init"

    local vmlinuz
    vmlinuz=$(compgen -G "$pkg/boot/vmlinuz-$abi") || die "kernel package has no vmlinuz-$abi"
    mkdir -p "$out.new"
    cp "$vmlinuz" "$out.new/vmlinuz"
    (cd "$initrd" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) \
        >"$out.new/initramfs.cpio"
    cp "$initrd/etc/lab/modules" "$out.new/modules.txt"
    rm -rf "$out"
    mv "$out.new" "$out"
    rm -rf "$work"
}

cmd_prepare() {
    local refresh=0
    while (($#)); do
        case $1 in
            --refresh) refresh=1 ;;
            *) usage ;;
        esac
        shift
    done
    mkdir -p "$CACHE_DIR"
    exec 8>"$CACHE_DIR/.lock"
    flock -w 600 8 || die "another prepare holds $CACHE_DIR/.lock"
    # Leftovers of an interrupted build.
    rm -rf "$CACHE_DIR"/build.* "$CACHE_DIR"/kernels/*.new

    local abi='' current=$CACHE_DIR/current
    # Fast path: the kernel in use stays until --refresh or an explicit ABI.
    if ((refresh == 0)) && [[ -r $current/abi ]]; then
        read -r abi <"$current/abi"
        [[ -n ${IBPROBE_LAB_KERNEL_ABI:-} && $IBPROBE_LAB_KERNEL_ABI != "$abi" ]] && abi=
    fi
    if [[ -n $abi && -r $current/stamp ]] \
        && [[ $(<"$current/stamp") == "$(initramfs_key "$abi")" ]]; then
        return 0
    fi

    local start
    start=$(now_ms)
    lab_install_deps
    [[ -n $abi ]] || abi=$(choose_kernel_abi)
    local deb kdir=$CACHE_DIR/kernels/$abi
    deb=$(download_kernel_deb "$abi")
    mkdir -p "$CACHE_DIR/kernels"
    build_initramfs "$abi" "$deb" "$kdir"
    echo "$abi" >"$kdir/abi"
    initramfs_key "$abi" >"$kdir/stamp"
    ln -sfn "kernels/$abi" "$current.new" && mv -T "$current.new" "$current"
    say "prepared kernel $abi ($(wc -l <"$kdir/modules.txt") modules) in $(elapsed_s "$start") s: $kdir"
}

choose_kernel_abi() {
    local abi
    if abi=$(resolve_kernel_abi); then
        echo "$abi"
        return 0
    fi
    if ((EUID == 0)); then
        say "no package lists for linux-image-amd64; running apt-get update"
        apt-get update >&2 || true
        if abi=$(resolve_kernel_abi); then
            echo "$abi"
            return 0
        fi
    fi
    if abi=$(cached_kernel_abi); then
        say "warning: linux-image-amd64 unknown to apt; using the cached kernel $abi"
        echo "$abi"
        return 0
    fi
    die "cannot resolve the kernel ABI (set IBPROBE_LAB_KERNEL_ABI, e.g. 6.1.0-57-amd64)"
}

cached_kernel_abi() { # newest kernel already in the cache (offline fallback)
    local d
    d=$(compgen -G "$CACHE_DIR/debs/linux-image-*-amd64-unsigned_*_amd64.deb" | sort -V | tail -n1) \
        || return 1
    d=$(basename "$d")
    d=${d#linux-image-}
    echo "${d%%-unsigned_*}"
}

# ---------------------------------------------------------------------------
# up / down / status

port_in_use() { [[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]]; }

# The directory of the lab's unix sockets (the lab link, each VM's QMP monitor);
# sun_path holds 107 bytes, so a deep state dir gets a short directory of its
# own (removed by down).
new_socket_dir() {
    local dir=$RUN_DIR
    if ((${#dir} > 90)); then
        dir=$(mktemp -d "${TMPDIR:-/tmp}/ibprobe-lab.XXXXXX")
        echo "$dir" >"$RUN_DIR/sockdir"
    fi
    echo "$dir"
}

socket_dir() {
    if [[ -r $RUN_DIR/sockdir ]]; then
        cat "$RUN_DIR/sockdir"
    else
        echo "$RUN_DIR"
    fi
}

# Free TCP ports are handed out once per `up`, so the search runs in this
# shell (not in a command substitution) to remember what it gave away.
declare -A PORTS_TAKEN=()
pick_port() { # VAR [PREFERRED]: sets VAR to a free TCP port on 127.0.0.1
    local -n out=$1
    local p=${2:-}
    if [[ -n $p ]]; then
        [[ $p =~ ^[0-9]+$ ]] || die "bad port '$p'"
        port_in_use "$p" && die "port $p is in use"
    else
        for ((p = PORT_BASE; p < PORT_BASE + 2000; p++)); do
            [[ -z ${PORTS_TAKEN[$p]:-} ]] && ! port_in_use "$p" && break
        done
        ((p < PORT_BASE + 2000)) || die "no free port in $PORT_BASE..$((PORT_BASE + 1999))"
    fi
    PORTS_TAKEN[$p]=1
    out=$p
}

host_index() {
    case $1 in
        A) echo 1 ;;
        B) echo 2 ;;
        C) echo 3 ;;
        D) echo 4 ;;
    esac
}

switch_of() { [[ $1 == A || $1 == B ]] && echo leaf1 || echo leaf2; }

qemu_command() { # HOST MODE SOCKET_DIR FWDSPEC...
    local host=$1 mode=$2 sock_dir=$3
    shift 3
    local idx kdir=$CACHE_DIR/current vdir
    idx=$(host_index "$host")
    vdir=$(vm_dir "$host")
    local addr=10.99.0.$idx/24
    local link_mac=52:54:00:99:00:0$idx mgmt_mac=52:54:00:98:00:0$idx
    # loglevel=6: kernel notices and worse reach the console log (a few dozen
    # lines; the emulated UART is slow, full info level costs seconds).
    # TSC as clocksource: under TCG the kernel would fall back to HPET, where every
    # clock_gettime() is a trapped MMIO read costing microseconds, which distorts latency probes.
    # tsc=reliable turns off the watchdog that would catch a wrongly calibrated TSC, so the
    # frequency is given, not calibrated: a VM booting on a busy host once took the PIT's
    # reading (407 MHz against the HPET's 2594 MHz) and its clock ran six times too fast.
    local append="console=ttyS0 panic=-1 loglevel=6 clocksource=tsc tsc=reliable"
    [[ -n $HOST_TSC_KHZ ]] && append+=" tsc_early_khz=$HOST_TSC_KHZ"
    append+=" lab.host=$host lab.mode=$mode"
    append+=" lab.addr=$addr lab.mgmt_mac=$mgmt_mac"
    local user="user,id=u0,restrict=on,net=10.0.2.0/24,ipv6=off"
    local fwd
    for fwd in "$@"; do user+=",hostfwd=tcp:127.0.0.1:${fwd#*:}-:${fwd%%:*}"; done

    # shellcheck disable=SC2054  # commas belong to qemu option values
    QEMU_ARGS=(qemu-system-x86_64
        -name "ibprobe-lab-$host"
        -machine pc -accel tcg,thread=multi -cpu "$VM_CPU" -smp "$VM_SMP" -m "$VM_MEM"
        -nodefaults -no-user-config -display none -no-reboot
        -serial "file:$(console_log "$host")"
        -kernel "$kdir/vmlinuz" -initrd "$kdir/initramfs.cpio"
        -virtfs "local,path=/,mount_tag=hostroot,readonly=on,security_model=passthrough,multidevs=remap"
        -virtfs "local,path=/usr,mount_tag=hostusr,readonly=on,security_model=passthrough,multidevs=remap"
        -virtfs "local,path=$vdir/xchg,mount_tag=xchg,security_model=none,multidevs=remap"
        -device virtio-serial-pci,id=vser -chardev "pipe,id=wake,path=$vdir/wake"
        -device virtserialport,bus=vser.0,chardev=wake,name=ibprobe-lab.wake
        -qmp "unix:$sock_dir/qmp-$host.sock,server=on,wait=off"
        -daemonize -pidfile "$vdir/qemu.pid")
    if [[ $mode == two ]]; then
        # A unix stream socket between the two qemus: lossless (flow control,
        # where a UDP socket drops under load) and without the Nagle and
        # delayed-ACK stalls of a TCP socket, either of which makes rxe
        # retransmit.
        local server=on
        [[ $host == B ]] && server=off
        append+=" lab.link_mac=$link_mac"
        QEMU_ARGS+=(-netdev "stream,id=n0,server=$server,addr.type=unix,addr.path=$sock_dir/link.sock"
            -device "virtio-net-pci,id=labnic,netdev=n0,mac=$link_mac,romfile=")
    elif [[ $mode == fabric ]]; then
        # The same stream framing to a port of the lab switch (lab-switch.pl), which listens
        # before any VM starts. The guest sets its lab NIC up as in two-host mode.
        append=${append/lab.mode=fabric/lab.mode=two}
        append+=" lab.link_mac=$link_mac"
        QEMU_ARGS+=(-netdev "stream,id=n0,server=off,addr.type=unix,addr.path=$sock_dir/port-$host.sock"
            -device "virtio-net-pci,id=labnic,netdev=n0,mac=$link_mac,romfile=")
    fi
    QEMU_ARGS+=(-netdev "$user" -device "virtio-net-pci,netdev=u0,mac=$mgmt_mac,romfile="
        -append "$append")
}

start_vm() { # HOST MODE SOCKET_DIR FWDSPEC...
    local host=$1 vdir
    vdir=$(vm_dir "$host")
    mkdir -p "$vdir/xchg/jobs"
    mkfifo "$vdir/wake.in" "$vdir/wake.out"
    cp "$LAB_DIR/guest-agent.sh" "$vdir/xchg/agent.sh"
    : >"$(console_log "$host")"
    qemu_command "$@"
    printf '%q ' "${QEMU_ARGS[@]}" >"$vdir/qemu.cmdline"
    if ! "${QEMU_ARGS[@]}" 2>"$vdir/qemu.stderr"; then
        say "error: qemu for VM $host did not start:"
        cat "$vdir/qemu.stderr" >&2
        return 1
    fi
}

wait_until_ready() { # DEADLINE_MS HOST...
    local deadline=$1 host pending
    shift
    while :; do
        pending=()
        for host in "$@"; do
            local x
            x=$(xchg_dir "$host")
            [[ -e $x/ready ]] && continue
            if [[ -e $x/failed ]]; then
                say "error: VM $host failed to boot: $(<"$x/failed")"
                console_tail "$host"
                return 1
            fi
            if ! vm_running "$host"; then
                say "error: VM $host exited during boot"
                console_tail "$host"
                return 1
            fi
            pending+=("$host")
        done
        ((${#pending[@]} == 0)) && return 0
        if (($(now_ms) > deadline)); then
            say "error: VM ${pending[*]} not ready within ${BOOT_TIMEOUT} s (IBPROBE_LAB_BOOT_TIMEOUT)"
            for host in "${pending[@]}"; do console_tail "$host"; done
            return 1
        fi
        sleep 0.2
    done
}

# The host's TSC frequency in kHz, which a TCG guest's TSC runs at (QEMU reads the host's
# counter for the guest's RDTSC); empty when it cannot be measured (not x86-64, no python3).
host_tsc_khz() {
    python3 - 2>/dev/null <<'PY' || true
import ctypes, mmap, time
# rdtsc; shl rdx, 32; or rax, rdx; ret
code = bytes([0x0F, 0x31, 0x48, 0xC1, 0xE2, 0x20, 0x48, 0x09, 0xD0, 0xC3])
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
rdtsc = ctypes.CFUNCTYPE(ctypes.c_uint64)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
rates = []
for _ in range(5):
    t0, c0 = time.monotonic_ns(), rdtsc()
    time.sleep(0.1)
    c1, t1 = rdtsc(), time.monotonic_ns()
    rates.append((c1 - c0) * 1e6 / (t1 - t0))
print(round(sorted(rates)[2]))
PY
}

# Every VM's clock runs at the host's rate: a guest whose clock runs fast times everything out
# early (pings, probes) and sends at a multiple of its configured rates. Guest uptime against
# host time over 4 s. Each uptime read happens somewhere between the host's timestamps before and
# after its exec, which on a loaded host can be a second apart, so the rate is known only within
# bounds: the VM is refused when even the bound nearest to 1 is more than 20 % off.
check_clocks() { # HOST...
    local host before u
    local -A before0 after0 guest0
    for host in "$@"; do
        before0[$host]=$(now_ms)
        u=$("$SELF" exec --timeout 30 "$host" -- cat /proc/uptime) || return 1
        after0[$host]=$(now_ms)
        guest0[$host]=${u%% *}
    done
    sleep 4
    for host in "$@"; do
        before=$(now_ms)
        u=$("$SELF" exec --timeout 30 "$host" -- cat /proc/uptime) || return 1
        if ! awk -v longest=$(($(now_ms) - before0[$host])) -v shortest=$((before - after0[$host])) \
            -v g0="${guest0[$host]}" -v g1="${u%% *}" \
            'BEGIN { low = (g1 - g0) * 1000 / longest; high = (g1 - g0) * 1000 / shortest
                     printf "%.2f-%.2f\n", low, high; exit !(high >= 0.8 && low <= 1.25) }' \
            >"$RUN_DIR/clock-$host"; then
            say "error: VM $host's clock runs at $(<"$RUN_DIR/clock-$host") times the host's (TSC calibration, see its console)"
            console_tail "$host" 10
            return 1
        fi
    done
}

check_link() { # two-host mode: A reaches B over the lab link
    if ! "$SELF" exec --timeout 30 A -- busybox ping -c 1 -W 10 10.99.0.2 >/dev/null; then
        say "error: VM A cannot reach VM B (10.99.0.2) over the lab link"
        console_tail A 10
        console_tail B 10
        return 1
    fi
}

check_fabric() { # fabric mode: A reaches every other VM, through its switch and the trunk
    local host
    for host in B C D; do
        if ! "$SELF" exec --timeout 30 A -- busybox ping -c 1 -W 10 "10.99.0.$(host_index "$host")" >/dev/null; then
            say "error: VM A cannot reach VM $host (10.99.0.$(host_index "$host")) over the lab fabric"
            console_tail A 10
            console_tail "$host" 10
            return 1
        fi
    done
}

switch_pid() { # pid of the lab switch if it is running
    local pid
    [[ -r $RUN_DIR/switch.pid ]] || return 1
    read -r pid <"$RUN_DIR/switch.pid" || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$RUN_DIR/trunk" || return 1
    echo "$pid"
}

start_switch() { # SOCKET_DIR
    local host i
    local -a ports=()
    for host in "${FABRIC_HOSTS[@]}"; do ports+=("$host:$(switch_of "$host")"); done
    setsid perl "$LAB_DIR/lab-switch.pl" "$RUN_DIR/trunk" "$1" "${ports[@]}" \
        </dev/null >/dev/null 2>"$LOG_DIR/switch.log" &
    echo $! >"$RUN_DIR/switch.pid"
    # It listens on every port before it writes its state.
    for ((i = 0; i < 100; i++)); do
        [[ -r $RUN_DIR/trunk ]] && switch_pid >/dev/null && return 0
        kill -0 "$(<"$RUN_DIR/switch.pid")" 2>/dev/null || break
        sleep 0.1
    done
    say "error: the lab switch did not start: $(cat "$LOG_DIR/switch.log")"
    return 1
}

stop_switch() {
    local pid i
    pid=$(switch_pid) || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

cmd_up() {
    local mode=${1:-}
    [[ $mode == one || $mode == two || $mode == fabric ]] || usage
    shift
    local -a guest_ports=()
    while (($#)); do
        case $1 in
            --forward)
                [[ ${2:-} =~ ^[0-9]+$ ]] || die "--forward needs a guest TCP port"
                guest_ports+=("$2")
                shift 2
                ;;
            *) usage ;;
        esac
    done

    # qemu option values cannot carry commas.
    [[ $STATE_DIR != *,* && $CACHE_DIR != *,* ]] || die "state and cache paths must not contain ','"
    local host
    for host in "${FABRIC_HOSTS[@]}"; do
        vm_running "$host" && die "the lab is already up ($STATE_DIR); run lab.sh down first"
    done
    cmd_prepare
    # Release the cache lock: the daemonized VMs would inherit its descriptor and hold it for
    # the lab's lifetime, blocking every other lab's prepare until this one is down.
    exec 8>&-
    # Leftovers of a lab whose VMs died without `down`.
    [[ -r $RUN_DIR/sockdir ]] && rm -rf "$(<"$RUN_DIR/sockdir")"
    rm -rf "$RUN_DIR"
    mkdir -p "$RUN_DIR" "$LOG_DIR"
    echo "$mode" >"$RUN_DIR/mode"
    # Measured on a 2-core host: one VM runs server and client of a loopback
    # test and wants both cores; two VMs with 2 vCPUs each oversubscribe the
    # host and boot slower, without better perftest figures.
    VM_SMP=${IBPROBE_LAB_SMP:-$([[ $mode == one ]] && echo 2 || echo 1)}
    VM_MEM=$VM_MEM_MB
    [[ $mode == fabric ]] && VM_MEM=$FABRIC_VM_MEM_MB

    local -a hosts=(A)
    [[ $mode == two ]] && hosts=(A B)
    [[ $mode == fabric ]] && hosts=("${FABRIC_HOSTS[@]}")
    local sock_dir gp hp
    sock_dir=$(new_socket_dir)
    if [[ $mode == fabric ]] && ! start_switch "$sock_dir"; then
        cmd_down >/dev/null 2>&1
        exit 1
    fi
    : >"$RUN_DIR/ports"
    local -A fwds=()
    for host in "${hosts[@]}"; do
        for gp in "${guest_ports[@]}"; do
            local var="IBPROBE_LAB_HOSTFWD_${host}_${gp}"
            pick_port hp "${!var:-}"
            echo "$host $gp $hp" >>"$RUN_DIR/ports"
            fwds[$host]+=" $gp:$hp"
        done
    done

    local start
    start=$(now_ms)
    local mode_name=$mode-host
    [[ $mode == fabric ]] && mode_name=fabric
    HOST_TSC_KHZ=$(host_tsc_khz)
    [[ -n $HOST_TSC_KHZ ]] || say "warning: cannot measure the host's TSC frequency; the VMs calibrate it"
    say "booting VM ${hosts[*]} ($mode_name mode, ${VM_SMP} vCPU, ${VM_MEM} MiB, TCG)"
    for host in "${hosts[@]}"; do
        # shellcheck disable=SC2086  # fwds is a word list
        start_vm "$host" "$mode" "$sock_dir" ${fwds[$host]:-} || {
            cmd_down >/dev/null 2>&1
            exit 1
        }
    done
    if ! wait_until_ready $((start + BOOT_TIMEOUT * 1000)) "${hosts[@]}"; then
        cmd_down >/dev/null 2>&1 || true
        exit 1
    fi
    if ! check_clocks "${hosts[@]}"; then
        cmd_down >/dev/null 2>&1 || true
        exit 1
    fi
    if [[ $mode == two ]] && ! check_link; then
        cmd_down >/dev/null 2>&1 || true
        exit 1
    fi
    if [[ $mode == fabric ]] && ! check_fabric; then
        cmd_down >/dev/null 2>&1 || true
        exit 1
    fi
    say "lab up in $(elapsed_s "$start") s"
    cmd_status
}

# A daemonized qemu is not our child: once it exits it may linger as a zombie
# until init reaps it, which counts as gone.
pid_alive() { # PID
    local stat
    read -r stat <"/proc/$1/stat" 2>/dev/null || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

stop_vm() { # HOST
    local pid i
    pid=$(vm_pid "$1") || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    say "warning: qemu pid $pid of VM $1 did not exit"
    return 1
}

cmd_down() {
    local host rc=0
    for host in "${FABRIC_HOSTS[@]}"; do
        if vm_running "$host"; then
            stop_vm "$host" || rc=1
            say "VM $host stopped"
        fi
    done
    stop_switch
    if ((rc == 0)); then
        [[ -r $RUN_DIR/sockdir ]] && rm -rf "$(<"$RUN_DIR/sockdir")"
        rm -rf "$RUN_DIR"
    fi
    return "$rc"
}

cmd_status() {
    local hosts host up=0 total=0
    if ! hosts=$(lab_hosts) || [[ ! -d $RUN_DIR ]]; then
        echo "lab: down (state $STATE_DIR)"
        return 3
    fi
    if fabric_lab; then
        echo "lab: fabric mode (A B on leaf1, C D on leaf2, trunk $(cat "$RUN_DIR/trunk" 2>/dev/null || echo gone)), state $STATE_DIR"
    else
        echo "lab: $(<"$RUN_DIR/mode")-host mode, state $STATE_DIR"
    fi
    for host in $hosts; do
        local state=down pid='' ready=''
        total=$((total + 1))
        if pid=$(vm_pid "$host"); then
            state=booting
            if [[ -r $(xchg_dir "$host")/ready ]]; then
                state=up
                up=$((up + 1))
                ready=$(tr '\n' ' ' <"$(xchg_dir "$host")/ready")
            fi
        fi
        echo "  VM $host: $state${pid:+ (qemu pid $pid)} ${ready}"
        local h gp hp
        while read -r h gp hp; do
            [[ $h == "$host" ]] && echo "    tcp 127.0.0.1:$hp -> VM $host :$gp"
        done <"$RUN_DIR/ports"
    done
    ((up == total)) || return 3
}

# ---------------------------------------------------------------------------
# jobs

new_job_name() { # PREFIX
    echo "$1-$(date +%s%N)-$$"
}

# The job runs in CWD; a CWD that the VM lacks (a host path created after the
# VM mounted the host root, say) is an error when asked for with --cwd,
# otherwise the job runs in /.
write_job() { # HOST NAME TIMEOUT CWD CWD_STRICT(0|1) ENV_ARRAY_NAME -- CMD...
    local host=$1 name=$2 limit=$3 cwd=$4 strict=$5
    local -n envs=$6
    shift 7
    local jobs tmp
    jobs=$(xchg_dir "$host")/jobs
    tmp=$jobs/.new-$name
    mkdir -p "$tmp"
    {
        echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        echo "export HOME=/root LANG=C.UTF-8 TERM=dumb TMPDIR=/run/tmp LAB_HOST=$host"
        local kv
        for kv in "${envs[@]}"; do printf 'export %q\n' "$kv"; done
        if ((strict)); then
            printf 'if ! cd -- %q 2>/dev/null; then\n' "$cwd"
            printf '    echo %q >&2\n' "lab: directory $cwd does not exist in VM $host"
            echo "    exit $RC_LAB_FAILURE"
            echo 'fi'
        else
            printf 'cd -- %q 2>/dev/null || cd /\n' "$cwd"
        fi
        printf 'if ! command -v -- %q >/dev/null; then\n' "$1"
        printf '    echo %q >&2\n' "lab: $1: command not found in VM $host"
        echo '    exit 127'
        echo 'fi'
        printf 'exec'
        printf ' %q' "$@"
        echo
    } >"$tmp/job.sh"
    echo "$limit" >"$tmp/timeout"
    mv -T "$tmp" "$jobs/$name"
    wake_agent "$host"
}

# Tells the VM's agent to look at its jobs (see guest-agent.sh). The FIFO is
# opened read-write, so this never blocks, even when qemu is gone.
wake_agent() { # HOST
    local fifo
    fifo=$(vm_dir "$1")/wake.in
    [[ -p $fifo ]] && printf . 1<>"$fifo"
    return 0
}

# A pause that starts no process: a read with a timeout on a pipe this script holds both ends
# of, so nothing ever arrives. The job loops below poll every 20 ms; an external sleep each time
# would cost a fork and an exec per poll.
NAP_FD=
nap() { # SECONDS
    [[ -n $NAP_FD ]] || exec {NAP_FD}<> <(:)
    read -r -t "$1" -u "$NAP_FD" _ || true
}

wait_job_pickup() { # HOST NAME
    local dir deadline polls=0
    dir=$(xchg_dir "$1")/jobs/$2
    deadline=$(($(now_ms) + PICKUP_TIMEOUT * 1000))
    until [[ -s $dir/pid ]]; do
        if ((++polls % 25 == 0)) && ! vm_running "$1"; then
            say "error: VM $1 stopped"
            console_tail "$1" 10
            return 1
        fi
        if ((${EPOCHREALTIME/./} / 1000 > deadline)); then
            say "error: the agent in VM $1 did not pick up job $2 within ${PICKUP_TIMEOUT} s"
            console_tail "$1" 10
            return 1
        fi
        nap 0.02
    done
}

# Copies what the job wrote since the last call to stdout/stderr.
declare -A STREAM_OFFSET=()
stream_job_output() { # DIR
    local f fd size off
    for f in stdout stderr; do
        [[ -e $1/$f ]] || continue
        size=$(stat -c %s "$1/$f")
        off=${STREAM_OFFSET[$f]:-0}
        if ((size > off)); then
            fd=1
            [[ $f == stderr ]] && fd=2
            tail -c +$((off + 1)) "$1/$f" | head -c $((size - off)) >&"$fd"
            STREAM_OFFSET[$f]=$size
        fi
    done
}

# Streams a job's output until it ends; returns its exit status.
follow_job() { # HOST NAME TIMEOUT
    local host=$1 name=$2 limit=$3 dir deadline=0 rc polls=0
    dir=$(xchg_dir "$host")/jobs/$name
    ((limit > 0)) && deadline=$(($(now_ms) + (limit + EXEC_GRACE) * 1000))
    # The end is looked for every 20 ms, the output streamed every 200 ms and the VM checked
    # every second.
    while [[ ! -s $dir/rc ]]; do
        ((++polls % 10 == 0)) && stream_job_output "$dir"
        if ((polls % 50 == 0)) && ! vm_running "$host"; then
            say "error: VM $host stopped while running job $name"
            console_tail "$host" 10
            return "$RC_LAB_FAILURE"
        fi
        if ((deadline > 0 && ${EPOCHREALTIME/./} / 1000 > deadline)); then
            say "error: job $name in VM $host did not end within $((limit + EXEC_GRACE)) s; the VM is not responding"
            console_tail "$host" 10
            return "$RC_LAB_FAILURE"
        fi
        nap 0.02
    done
    stream_job_output "$dir"
    read -r rc <"$dir/rc"
    if [[ -e $dir/timedout ]]; then
        say "error: timeout: '$(tail -n1 "$dir/job.sh" | cut -c6-)' in VM $host ran longer than $limit s; stopped"
        return "$RC_TIMEOUT"
    fi
    return "$rc"
}

cancel_followed_job() {
    [[ -n ${FOLLOWED_JOB:-} && -d $FOLLOWED_JOB ]] || return 0
    : >"$FOLLOWED_JOB/cancel"
    : >"$FOLLOWED_JOB/abandoned"
    wake_agent "$JOB_HOST"
}

# Removes foreground jobs whose caller went away, once they have ended.
sweep_abandoned_jobs() { # HOST
    local d
    for d in "$(xchg_dir "$1")"/jobs/*/; do
        [[ -e $d/abandoned && -s $d/rc ]] && rm -rf "$d"
    done
    return 0
}

parse_job_options() { # sets JOB_* globals; leaves the command in JOB_CMD
    JOB_TIMEOUT=$EXEC_TIMEOUT_DEFAULT
    JOB_BACKGROUND=0
    JOB_NAME=
    JOB_CWD=$PWD
    JOB_CWD_STRICT=0
    JOB_ENV=()
    local timeout_set=0
    while (($#)); do
        case $1 in
            --timeout)
                [[ ${2:-} =~ ^[0-9]+$ ]] || die "--timeout needs whole seconds (0 = none)"
                JOB_TIMEOUT=$2 timeout_set=1
                shift 2
                ;;
            --background | -b) JOB_BACKGROUND=1 && shift ;;
            --name)
                [[ ${2:-} =~ ^[A-Za-z0-9_.][A-Za-z0-9_.-]*$ ]] || die "--name needs [A-Za-z0-9_.-]+"
                JOB_NAME=$2
                shift 2
                ;;
            --cwd)
                [[ -n ${2:-} ]] || die "--cwd needs a directory"
                JOB_CWD=$2 JOB_CWD_STRICT=1
                shift 2
                ;;
            --env)
                [[ ${2:-} == [A-Za-z_]*=* ]] || die "--env needs NAME=VALUE"
                JOB_ENV+=("$2")
                shift 2
                ;;
            [A-D]) break ;;
            *) die "unknown option '$1' (expected A or B, then -- CMD...)" ;;
        esac
    done
    JOB_HOST=${1:-}
    validate_host "$JOB_HOST"
    shift
    [[ ${1:-} == -- ]] && shift
    (($#)) || die "no command given (lab.sh exec A -- CMD...)"
    JOB_CMD=("$@")
    ((JOB_BACKGROUND && !timeout_set)) && JOB_TIMEOUT=0
    return 0
}

cmd_exec() {
    parse_job_options "$@"
    require_vm "$JOB_HOST"
    sweep_abandoned_jobs "$JOB_HOST"
    local name=$JOB_NAME jobs
    jobs=$(xchg_dir "$JOB_HOST")/jobs
    if [[ -z $name ]]; then
        name=$(new_job_name "$([[ $JOB_BACKGROUND == 1 ]] && echo bg || echo x)")
    elif [[ -e $jobs/$name ]]; then
        [[ -s $jobs/$name/rc ]] || die "job $name is still running in VM $JOB_HOST"
        rm -rf "${jobs:?}/$name"
    fi
    write_job "$JOB_HOST" "$name" "$JOB_TIMEOUT" "$JOB_CWD" "$JOB_CWD_STRICT" JOB_ENV -- "${JOB_CMD[@]}"
    if ((JOB_BACKGROUND)); then
        wait_job_pickup "$JOB_HOST" "$name" || exit "$RC_LAB_FAILURE"
        echo "$name"
        return 0
    fi
    FOLLOWED_JOB=$jobs/$name
    trap 'cancel_followed_job; exit 130' INT
    trap 'cancel_followed_job; exit 143' TERM
    wait_job_pickup "$JOB_HOST" "$name" || {
        cancel_followed_job
        exit "$RC_LAB_FAILURE"
    }
    local rc=0
    follow_job "$JOB_HOST" "$name" "$JOB_TIMEOUT" || rc=$?
    if ((rc == RC_LAB_FAILURE)); then
        cancel_followed_job
    else
        rm -rf "${jobs:?}/$name"
    fi
    exit "$rc"
}

cmd_spawn() { cmd_exec --background "$@"; }

job_dir_of() { # HOST NAME
    validate_host "$1"
    [[ -n ${2:-} ]] || usage
    local d
    d=$(xchg_dir "$1")/jobs/$2
    [[ -d $d ]] || die "no job $2 in VM $1"
    echo "$d"
}

cmd_jobs() {
    validate_host "${1:-}"
    local d name state
    for d in "$(xchg_dir "$1")"/jobs/*/; do
        [[ -d $d ]] || continue
        name=${d%/}
        name=${name##*/}
        if [[ -s $d/rc ]]; then
            state="exited $(<"$d/rc")"
        elif [[ -s $d/pid ]]; then
            state="running pid $(<"$d/pid")"
        else
            state=queued
        fi
        printf '%s\t%s\t%s\n' "$name" "$state" "$(tail -n1 "$d/job.sh" | cut -c6-)"
    done
}

cmd_output() {
    local stream=stdout
    [[ ${1:-} == --stderr ]] && stream=stderr && shift
    local d
    d=$(job_dir_of "$@")
    [[ -e $d/$stream ]] && cat "$d/$stream"
    return 0
}

cmd_wait() {
    local limit=$EXEC_TIMEOUT_DEFAULT
    if [[ ${1:-} == --timeout ]]; then
        [[ ${2:-} =~ ^[0-9]+$ ]] || die "--timeout needs whole seconds"
        limit=$2
        shift 2
    fi
    local d host=${1:-} rc=0
    d=$(job_dir_of "$@")
    require_vm "$host"
    # Waiting is bounded here; the job itself keeps running if it outlives us.
    local deadline=$(($(now_ms) + limit * 1000))
    local polls=0
    while [[ ! -s $d/rc ]]; do
        ((++polls % 50 == 0)) && ! vm_running "$host" && {
            say "error: VM $host stopped"
            exit "$RC_LAB_FAILURE"
        }
        if ((${EPOCHREALTIME/./} / 1000 > deadline)); then
            say "error: timeout: job $2 in VM $host still running after $limit s"
            exit "$RC_TIMEOUT"
        fi
        nap 0.02
    done
    stream_job_output "$d"
    read -r rc <"$d/rc"
    if [[ -e $d/timedout ]]; then
        say "error: timeout: job $2 in VM $host was stopped by its own timeout"
        exit "$RC_TIMEOUT"
    fi
    exit "$rc"
}

cmd_kill() {
    local d host=${1:-} i
    d=$(job_dir_of "$@")
    if [[ ! -s $d/rc ]] && vm_running "$host"; then
        : >"$d/cancel"
        wake_agent "$host"
        # The agent sends SIGTERM, then SIGKILL after 3 s.
        for ((i = 0; i < 500; i++)); do
            [[ -s $d/rc ]] && break
            nap 0.02
        done
        [[ -s $d/rc ]] || say "warning: job $2 in VM $host did not confirm its end"
    fi
}

# Ends every job of every VM at once (SIGTERM, SIGKILL 3 s later, as kill), names each one that
# was still running, and forgets them all: a lab shared by several tests hands the next one VMs
# with nothing left running and no job names taken.
cmd_reset() {
    local hosts host d name rc=0 i
    local -a running=()
    hosts=$(lab_hosts) || die "no lab is up ($STATE_DIR)"
    for host in $hosts; do
        require_vm "$host"
        for d in "$(xchg_dir "$host")"/jobs/*/; do
            [[ -d $d && ! -s $d/rc ]] || continue
            name=${d%/}
            running+=("$host:${name##*/}")
            : >"$d/cancel"
        done
        wake_agent "$host"
    done
    for ((i = 0; i < 500; i++)); do
        local left=()
        for name in "${running[@]}"; do
            [[ -s $(xchg_dir "${name%%:*}")/jobs/${name#*:}/rc ]] || left+=("$name")
        done
        ((${#left[@]} == 0)) && break
        nap 0.02
    done
    for name in "${running[@]}"; do
        if [[ -s $(xchg_dir "${name%%:*}")/jobs/${name#*:}/rc ]]; then
            say "job ${name#*:} in VM ${name%%:*} was still running: stopped"
        else
            say "error: job ${name#*:} in VM ${name%%:*} did not end within 10 s"
            rc=1
        fi
    done
    ((rc == 0)) || return "$rc"
    for host in $hosts; do
        find "$(xchg_dir "$host")/jobs" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
    done
}

# ---------------------------------------------------------------------------
# queries

cmd_port() {
    validate_host "${1:-}"
    [[ ${2:-} =~ ^[0-9]+$ ]] || usage
    local h gp hp
    if [[ -r $RUN_DIR/ports ]]; then
        while read -r h gp hp; do
            [[ $h == "$1" && $gp == "$2" ]] && {
                echo "$hp"
                return 0
            }
        done <"$RUN_DIR/ports"
    fi
    die "no forward for VM $1 port $2 (lab.sh up ... --forward $2)"
}

cmd_addr() {
    validate_host "${1:-}"
    echo "10.99.0.$(host_index "$1")"
}

# Index of rxe0's RoCE v2 GID that carries the VM's IPv4 lab address
# (::ffff:10.99.0.x), the one perftest and probes need (-x IDX).
cmd_gid() {
    validate_host "${1:-}"
    local hex
    hex=$(printf '0000:0000:0000:0000:0000:ffff:0a63:%04x' "$(host_index "$1")")
    # shellcheck disable=SC2016  # expanded in the VM
    "$SELF" exec --timeout 60 "$1" -- bash -c '
        port=/sys/class/infiniband/rxe0/ports/1
        for gid in "$port"/gids/*; do
            i=${gid##*/}
            [[ $(<"$gid") == "$1" ]] || continue
            [[ $(<"$port/gid_attrs/types/$i") == "RoCE v2" ]] 2>/dev/null || continue
            echo "$i"
            exit 0
        done
        echo "lab: no RoCE v2 GID $1 on rxe0" >&2
        exit 1' _ "$hex"
}

# One QMP command to a VM's QEMU; prints the reply. perl (perl-base is
# essential on Debian) speaks the unix socket; every read is bounded.
qmp() { # HOST JSON
    local sock
    sock=$(socket_dir)/qmp-$1.sock
    [[ -S $sock ]] || die "VM $1 has no QMP socket ($sock)"
    # shellcheck disable=SC2016  # perl code
    perl -MIO::Socket::UNIX -e '
        my ($path, $command) = @ARGV;
        $SIG{ALRM} = sub { die "no answer from QMP at $path within 10 s\n" };
        alarm 10;
        my $s = IO::Socket::UNIX->new(Peer => $path) or die "cannot connect to $path: $!\n";
        $s->autoflush(1);
        sub reply {
            while (defined(my $line = <$s>)) {
                next if $line =~ /"event"|"QMP"/;
                return $line;
            }
            die "QMP at $path closed the connection\n";
        }
        print $s qq({"execute":"qmp_capabilities"}\n);
        reply() =~ /"return"/ or die "QMP refused capabilities negotiation\n";
        print $s "$command\n";
        my $answer = reply();
        print $answer;
        exit($answer =~ /"return"/ ? 0 : 1);
    ' "$sock" "$2"
}

# Carrier loss on a VM's lab NIC, as a pulled cable: QEMU drops every frame
# the VM sends or would receive there, the VM's eth0 loses carrier (rxe0 goes
# DOWN), and the other VM sees only silence. The VM's own interface stays
# configured, unlike `ip link set eth0 down` inside it.
cmd_link() {
    local host=${1:-} want=${2:-} state_file reply
    validate_host "$host"
    [[ $(lab_hosts 2>/dev/null) == "A B" ]] || fabric_lab || die "link needs the two-host lab"
    require_vm "$host"
    state_file=$(vm_dir "$host")/link
    if [[ -z $want ]]; then
        if [[ -r $state_file ]]; then cat "$state_file"; else echo up; fi
        return 0
    fi
    [[ $want == up || $want == down ]] || usage
    local up=true
    [[ $want == down ]] && up=false
    reply=$(qmp "$host" "{\"execute\":\"set_link\",\"arguments\":{\"name\":\"n0\",\"up\":$up}}") \
        || die "set_link on VM $host failed: $reply"
    echo "$want" >"$state_file"
    say "VM $host lab link $want"
}

# What QEMU holds of a VM's lab NIC: the netdev as the monitor shows it, and each virtqueue's
# indices as QEMU last read them. Receive (queue 0): last-avail-idx equal to shadow-avail-idx
# means QEMU found no buffer the guest gave it left to receive into. Transmit (queue 1):
# shadow-avail-idx ahead of last-avail-idx means frames the guest queued that QEMU has not taken.
cmd_nic() {
    local host=${1:-} queue request
    validate_host "$host"
    require_vm "$host"
    qmp "$host" '{"execute":"human-monitor-command","arguments":{"command-line":"info network"}}' \
        | perl -ne 'next unless /"return":\s*"(.*)"/; (my $t = $1) =~ s/\\r//g;
            print map { s/\\\\/\\/gr . "\n" } split /\\n/, $t'
    for queue in 0 1; do
        request='{"execute":"x-query-virtio-queue-status","arguments":'
        request+='{"path":"/machine/peripheral/labnic/virtio-backend","queue":'$queue'}}'
        printf 'virtqueue %s (%s): ' "$queue" "$([[ $queue == 0 ]] && echo receive || echo transmit)"
        qmp "$host" "$request" | perl -ne 'my @f = /"([a-z-]+-idx|signalled-used|inuse)":\s*(\d+)/g;
            my @pairs; push @pairs, shift(@f) . "=" . shift(@f) while @f; print "@pairs\n"'
    done
}

# The link between the fabric's two switches: down, frames between leaf1 and leaf2 are
# dropped, as on a cut uplink; hosts on one switch still reach each other.
cmd_trunk() {
    local want=${1:-} pid i signal=USR2
    fabric_lab || die "trunk needs the fabric lab (lab.sh up fabric)"
    pid=$(switch_pid) || die "the lab switch is not running"
    if [[ -z $want ]]; then
        cat "$RUN_DIR/trunk"
        return 0
    fi
    [[ $want == up || $want == down ]] || usage
    [[ $want == down ]] && signal=USR1
    kill -"$signal" "$pid" || die "cannot signal the lab switch (pid $pid)"
    for ((i = 0; i < 100; i++)); do
        [[ $(<"$RUN_DIR/trunk") == "$want" ]] && {
            say "trunk leaf1-leaf2 $want"
            return 0
        }
        sleep 0.05
    done
    die "the lab switch did not set the trunk $want"
}

cmd_console() {
    validate_host "${1:-}"
    local log
    log=$(console_log "$1")
    [[ -r $log ]] || die "no console log for VM $1"
    tr -d '\r' <"$log"
}

# ---------------------------------------------------------------------------

main() {
    local cmd=${1:-}
    (($#)) && shift
    case $cmd in
        prepare) cmd_prepare "$@" ;;
        up) cmd_up "$@" ;;
        down) cmd_down ;;
        status) cmd_status ;;
        reset) cmd_reset ;;
        exec) cmd_exec "$@" ;;
        spawn) cmd_spawn "$@" ;;
        jobs) cmd_jobs "$@" ;;
        wait) cmd_wait "$@" ;;
        output) cmd_output "$@" ;;
        kill) cmd_kill "$@" ;;
        port) cmd_port "$@" ;;
        addr) cmd_addr "$@" ;;
        gid) cmd_gid "$@" ;;
        link) cmd_link "$@" ;;
        nic) cmd_nic "$@" ;;
        trunk) cmd_trunk "$@" ;;
        console) cmd_console "$@" ;;
        -h | --help | help) usage 0 ;;
        *) usage ;;
    esac
}

main "$@"
