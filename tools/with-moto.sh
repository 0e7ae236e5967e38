#!/usr/bin/env bash
# Run a command with a moto server on 127.0.0.1 (a free port), and stop the
# server when the command ends, fails or is interrupted.
#
#   tools/with-moto.sh CMD [ARGS...]
#
# The command sees IDEM_TEST_MOTO_ENDPOINT, AWS_ENDPOINT_URL_DYNAMODB,
# AWS_ENDPOINT_URL_SQS and AWS_ENDPOINT_URL_SECRETS_MANAGER set to the server,
# dummy credentials, and a region.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="$(mktemp -d "${TMPDIR:-/tmp}/oncely-moto.XXXXXX")"
cleanup() {
	"$ROOT/tools/moto.sh" stop "$STATE" || true
	rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

endpoint="$("$ROOT/tools/moto.sh" start "$STATE")"
export IDEM_TEST_MOTO_ENDPOINT="$endpoint" AWS_ENDPOINT_URL_DYNAMODB="$endpoint"
export AWS_ENDPOINT_URL_SQS="$endpoint" AWS_ENDPOINT_URL_SECRETS_MANAGER="$endpoint"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
echo "with-moto: moto server at $endpoint" >&2
"$@"
