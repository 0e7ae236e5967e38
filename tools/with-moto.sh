#!/usr/bin/env bash
# Run a command with local moto servers on 127.0.0.1 (free ports), and stop
# them when the command ends, fails or is interrupted.
#
#   tools/with-moto.sh CMD [ARGS...]
#
# Up to three servers, each one moto process with one worker thread:
#   - "moto": DynamoDB and Secrets Manager. The command sees
#     IDEM_TEST_MOTO_ENDPOINT, AWS_ENDPOINT_URL_DYNAMODB and
#     AWS_ENDPOINT_URL_SECRETS_MANAGER set to it.
#   - "moto-sqs": SQS. The command sees IDEM_TEST_MOTO_SQS_ENDPOINT and
#     AWS_ENDPOINT_URL_SQS set to it.
#   - "moto-soak", with MOTO_SOAK=1 (make test): DynamoDB for the chaos
#     soak alone (IDEM_TEST_MOTO_SOAK_ENDPOINT). The soak sends thousands of requests
#     in a minute; on the shared worker thread they queued every other
#     package's calls behind them (and theirs behind the others': moto's
#     median reply during the soak was 200 ms).
# SQS has its own process because a queue's pollers would otherwise share
# DynamoDB's one worker thread, and moto's SQS cannot have more threads: its
# receives and deletes take no lock (measured: with 8 threads, concurrent
# receives handed out the same messages twice). Both moto's all the same
# serve every service, so older callers that send SQS calls to
# IDEM_TEST_MOTO_ENDPOINT keep working. MOTO_SQS=shared puts SQS on the
# first server instead (one process, for comparison).
#
# Dummy credentials and a region are set too.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="$(mktemp -d "${TMPDIR:-/tmp}/oncely-moto.XXXXXX")"
cleanup() {
	local status=$?
	# A start still running (Ctrl-C in the first seconds; background jobs
	# ignore it) writes its pid file when it ends: wait for it, then stop.
	wait || true
	# When the command failed, what the servers logged beyond their start
	# (waitress warnings, a request's traceback) may say why.
	if [[ $status -ne 0 ]]; then
		for name in moto moto-sqs moto-soak; do
			[[ -s "$STATE/$name.log" ]] || continue
			lines="$(grep -E -A 12 'WARNING|ERROR|Traceback|Exception' "$STATE/$name.log" | tail -n 40 || true)"
			[[ -z "$lines" ]] || printf 'with-moto: %s logged:\n%s\n' "$name" "$lines" >&2
		done
	fi
	"$ROOT/tools/moto.sh" stop "$STATE" moto-soak || true
	"$ROOT/tools/moto.sh" stop "$STATE" moto-sqs || true
	"$ROOT/tools/moto.sh" stop "$STATE" moto || true
	rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Start them all at once: each takes a few seconds to import moto.
"$ROOT/tools/moto.sh" start "$STATE" moto >"$STATE/ddb.out" &
ddb=$!
sqs_pid=""
if [[ "${MOTO_SQS:-}" != shared ]]; then
	"$ROOT/tools/moto.sh" start "$STATE" moto-sqs >"$STATE/sqs.out" &
	sqs_pid=$!
fi
soak=""
if [[ "${MOTO_SOAK:-}" == 1 ]]; then
	"$ROOT/tools/moto.sh" start "$STATE" moto-soak >"$STATE/soak.out" &
	soak=$!
fi
wait "$ddb"
endpoint="$(cat "$STATE/ddb.out")"
sqs_endpoint="$endpoint"
if [[ -n "$sqs_pid" ]]; then
	wait "$sqs_pid"
	sqs_endpoint="$(cat "$STATE/sqs.out")"
fi
soak_endpoint=""
if [[ -n "$soak" ]]; then
	wait "$soak"
	soak_endpoint="$(cat "$STATE/soak.out")"
	export IDEM_TEST_MOTO_SOAK_ENDPOINT="$soak_endpoint"
fi
export IDEM_TEST_MOTO_ENDPOINT="$endpoint" AWS_ENDPOINT_URL_DYNAMODB="$endpoint" AWS_ENDPOINT_URL_SECRETS_MANAGER="$endpoint"
export IDEM_TEST_MOTO_SQS_ENDPOINT="$sqs_endpoint" AWS_ENDPOINT_URL_SQS="$sqs_endpoint"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
servers="$endpoint (DynamoDB, Secrets Manager), $sqs_endpoint (SQS)"
if [[ -n "$soak_endpoint" ]]; then
	servers="$servers, $soak_endpoint (DynamoDB for the soak)"
fi
echo "with-moto: moto server at $servers" >&2
"$@"
