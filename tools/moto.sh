#!/usr/bin/env bash
# Start/stop a local moto server (DynamoDB etc.) for integration tests.
#
#   tools/moto.sh start STATEDIR [NAME]   -> prints endpoint (http://127.0.0.1:PORT)
#   tools/moto.sh stop  STATEDIR [NAME]   -> stops it (idempotent)
#
# NAME (default "moto") tells several servers in one STATEDIR apart
# (tools/with-moto.sh runs "moto" for DynamoDB and "moto-sqs" for SQS).
# State files: STATEDIR/NAME.pid, STATEDIR/NAME.endpoint, STATEDIR/NAME.log
# Env: MOTO_VENV (default: tools/venv.sh path moto), MOTO_START_TIMEOUT (s, default 30),
# MOTO_TRACE_DIR (each server logs its SQS calls to DIR/NAME.jsonl: tools/moto_server.py)
set -euo pipefail
set +m # no job control: the background child is then not a group leader, so setsid execs in place ($! == moto pid == pgid)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MOTO_VENV:-$("$ROOT/tools/venv.sh" path moto)}"
TIMEOUT="${MOTO_START_TIMEOUT:-30}"

# Any HTTP answer (even 4xx/5xx) from $1 means the server is up.
http_up() {
	"$VENV/bin/python" - "$1" <<'PY' >/dev/null 2>&1
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1] + "/moto-api/", timeout=1)
except urllib.error.HTTPError:
    pass
PY
}

die() { echo "moto.sh: $*" >&2; exit 1; }

usage() { die "usage: $0 {start|stop} STATEDIR [NAME]"; }

# True if the pid is alive (and not a zombie).
alive() {
	local pid="$1" st
	kill -0 "$pid" 2>/dev/null || return 1
	st="$(ps -o stat= -p "$pid" 2>/dev/null || true)"
	[[ -n "$st" && "$st" != Z* ]]
}

# True if any process in process group $1 is still alive (non-zombie).
group_alive() {
	local pgid="$1"
	ps -eo pgid=,stat= 2>/dev/null | awk -v g="$pgid" '$1==g && $2 !~ /^Z/ {f=1} END {exit !f}'
}

do_stop() {
	local dir="$1" pid
	[[ -f "$dir/$NAME.pid" ]] || return 0
	pid="$(cat "$dir/$NAME.pid" 2>/dev/null || true)"
	if [[ "$pid" =~ ^[0-9]+$ ]] && group_alive "$pid"; then
		kill -TERM -- "-$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			group_alive "$pid" || break
			sleep 0.1
		done
		if group_alive "$pid"; then
			kill -KILL -- "-$pid" 2>/dev/null || true
			for _ in $(seq 1 20); do
				group_alive "$pid" || break
				sleep 0.1
			done
		fi
		group_alive "$pid" && die "process group $pid did not exit"
	fi
	rm -f "$dir/$NAME.pid" "$dir/$NAME.endpoint" "$dir/$NAME.port"
}

do_start() {
	local dir="$1" port endpoint pid i
	[[ -x "$VENV/bin/moto_server" ]] ||
		die "$VENV/bin/moto_server not found; create it with: make tools (or tools/venv.sh install moto)"
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"

	# Already running (from this STATEDIR)? Reuse it.
	if [[ -f "$dir/$NAME.pid" && -f "$dir/$NAME.endpoint" ]]; then
		pid="$(cat "$dir/$NAME.pid")"
		endpoint="$(cat "$dir/$NAME.endpoint")"
		if [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" && http_up "$endpoint"; then
			echo "$endpoint"
			return 0
		fi
		do_stop "$dir"
	fi

	# The server binds a free port itself and writes it to $NAME.port: a
	# port picked here and bound later could be taken in between.
	rm -f "$dir/$NAME.port"

	# setsid: own session + process group (pgid == pid), so stop can kill the whole group.
	# MOTO_TRACE_DIR: each server traces its SQS calls to DIR/NAME.jsonl,
	# and its log (kept after the stop) is DIR/NAME.log.
	log="$dir/$NAME.log"
	if [[ -n "${MOTO_TRACE_DIR:-}" ]]; then
		mkdir -p "$MOTO_TRACE_DIR"
		export MOTO_TRACE_SQS="$MOTO_TRACE_DIR/$NAME.jsonl"
		log="$MOTO_TRACE_DIR/$NAME.log"
		ln -sf "$log" "$dir/$NAME.log"
	fi
	# PYTHONDONTWRITEBYTECODE= : the venv's byte-code is written on the
	# first start (tools/venv.sh compiles none), which makes later starts
	# take 2.5 s less CPU each, even where the machine sets it.
	PYTHONDONTWRITEBYTECODE= setsid "$VENV/bin/python" "$ROOT/tools/moto_server.py" -H 127.0.0.1 -p 0 --port-file "$dir/$NAME.port" </dev/null >"$log" 2>&1 &
	pid=$!
	echo "$pid" >"$dir/$NAME.pid"
	endpoint=""

	for i in $(seq 1 $((TIMEOUT * 5))); do
		if ! alive "$pid"; then
			echo "moto.sh: moto_server exited during startup; last log lines:" >&2
			tail -n 30 "$dir/$NAME.log" >&2 || true
			rm -f "$dir/$NAME.pid" "$dir/$NAME.endpoint" "$dir/$NAME.port"
			exit 1
		fi
		if [[ -z "$endpoint" && -s "$dir/$NAME.port" ]]; then
			endpoint="http://127.0.0.1:$(cat "$dir/$NAME.port")"
			echo "$endpoint" >"$dir/$NAME.endpoint"
		fi
		# Any HTTP answer on the port it bound means the server is up.
		if [[ -n "$endpoint" ]] && http_up "$endpoint"; then
			echo "$endpoint"
			return 0
		fi
		sleep 0.2
	done
	echo "moto.sh: moto_server did not answer on $endpoint within ${TIMEOUT}s; last log lines:" >&2
	tail -n 30 "$dir/$NAME.log" >&2 || true
	do_stop "$dir"
	exit 1
}

[[ $# -eq 2 || $# -eq 3 ]] || usage
NAME="${3:-moto}"
[[ "$NAME" =~ ^[A-Za-z0-9_-]+$ ]] || die "NAME must be letters, digits, - or _: got $NAME"
case "$1" in
start) do_start "$2" ;;
stop) do_stop "$2" ;;
*) usage ;;
esac
