#!/usr/bin/env bash
# AWS Lambda Runtime Interface Emulator (RIE) helper for local demos.
#
#   tools/rie.sh install                  -> builds .tools/bin/aws-lambda-rie (go install, ~25 s cold)
#   tools/rie.sh start STATEDIR BOOTSTRAP  -> prints invoke URL
#   tools/rie.sh stop  STATEDIR            -> stops RIE and the bootstrap (idempotent)
#
# Invoke: curl -XPOST "$(cat STATEDIR/rie.url)" -d '{...}'
# The bootstrap is started lazily on the first invoke, with RIE's environment
# (set AWS_LAMBDA_FUNCTION_NAME, AWS_LAMBDA_FUNCTION_TIMEOUT (s, default 300),
# AWS_LAMBDA_FUNCTION_MEMORY_SIZE, AWS_REGION, ... in the caller's env).
# State files: STATEDIR/rie.pid, rie.url, rie.log
set -euo pipefail
set +m # no job control: setsid then execs in place, so $! is RIE's pid (== its session id)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RIE_VERSION="v0.0.0-20261030222936-bef5c4ba774d"
RIE="${RIE_BIN:-$ROOT/.tools/bin/aws-lambda-rie}"
TIMEOUT="${RIE_START_TIMEOUT:-15}"

die() { echo "rie.sh: $*" >&2; exit 1; }
usage() { die "usage: $0 install | start STATEDIR BOOTSTRAP | stop STATEDIR"; }

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Live (non-zombie) processes in session $1 (RIE runs the bootstrap in its own
# process group but in RIE's session, so we track the session, not the group).
session_pids() {
	ps -eo pid=,sid=,stat= 2>/dev/null | awk -v s="$1" '$2==s && $3 !~ /^Z/ {print $1}'
}

do_install() {
	mkdir -p "$(dirname "$RIE")"
	GOBIN="$(dirname "$RIE")" go install "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$RIE_VERSION"
}

do_stop() {
	local dir="$1" pid
	[[ -f "$dir/rie.pid" ]] || return 0
	pid="$(cat "$dir/rie.pid" 2>/dev/null || true)"
	if [[ "$pid" =~ ^[0-9]+$ ]] && [[ -n "$(session_pids "$pid")" ]]; then
		# RIE handles SIGTERM: SIGKILLs the runtime, then exits (~0-2 s).
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			[[ -z "$(session_pids "$pid")" ]] && break
			sleep 0.1
		done
		local left
		left="$(session_pids "$pid")"
		if [[ -n "$left" ]]; then
			# shellcheck disable=SC2086
			kill -KILL $left 2>/dev/null || true
			sleep 0.2
		fi
		[[ -z "$(session_pids "$pid")" ]] || die "processes of session $pid did not exit"
	fi
	rm -f "$dir/rie.pid" "$dir/rie.url"
}

do_start() {
	local dir="$1" bootstrap="$2" port rport pid url
	[[ -x "$RIE" ]] || die "$RIE not found; run: $0 install"
	[[ -x "$bootstrap" ]] || die "bootstrap $bootstrap is not an executable file"
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	bootstrap="$(cd "$(dirname "$bootstrap")" && pwd)/$(basename "$bootstrap")"
	do_stop "$dir"

	port="$(free_port)"
	rport="$(free_port)"
	while [[ "$rport" == "$port" ]]; do rport="$(free_port)"; done
	url="http://127.0.0.1:$port/2015-03-31/functions/function/invocations"

	# NB: RIE has no --help; unknown flags are ignored and the first
	# positional argument is the bootstrap command (rest = its args).
	# --runtime-api-address defaults to the fixed 127.0.0.1:9001, so always set it.
	setsid "$RIE" --runtime-interface-emulator-address "127.0.0.1:$port" \
		--runtime-api-address "127.0.0.1:$rport" "$bootstrap" </dev/null >"$dir/rie.log" 2>&1 &
	pid=$!
	echo "$pid" >"$dir/rie.pid"
	echo "$url" >"$dir/rie.url"

	for _ in $(seq 1 $((TIMEOUT * 10))); do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "rie.sh: aws-lambda-rie exited during startup; last log lines:" >&2
			tail -n 30 "$dir/rie.log" >&2 || true
			rm -f "$dir/rie.pid" "$dir/rie.url"
			exit 1
		fi
		# Any HTTP answer (GET / gives 404) means the listener is up.
		if python3 -c 'import sys,urllib.request,urllib.error
try: urllib.request.urlopen(sys.argv[1], timeout=1)
except urllib.error.HTTPError: pass' "http://127.0.0.1:$port/" >/dev/null 2>&1; then
			echo "$url"
			return 0
		fi
		sleep 0.1
	done
	echo "rie.sh: RIE did not listen on 127.0.0.1:$port within ${TIMEOUT}s; last log lines:" >&2
	tail -n 30 "$dir/rie.log" >&2 || true
	do_stop "$dir"
	exit 1
}

case "${1:-}" in
install) [[ $# -eq 1 ]] || usage; do_install ;;
start) [[ $# -eq 3 ]] || usage; do_start "$2" "$3" ;;
stop) [[ $# -eq 2 ]] || usage; do_stop "$2" ;;
*) usage ;;
esac
