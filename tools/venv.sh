#!/usr/bin/env bash
# The pinned Python tools' virtual environments, one per requirements file,
# installed with uv (pinned below; installed itself from PyPI with pip).
#
#   tools/venv.sh path NAME     print the venv of tools/requirements-NAME.txt
#   tools/venv.sh install NAME  create it unless it is there, then print it
#
# A venv's directory is keyed by what went into it: .tools/venv-NAME-<key>,
# where <key> hashes the requirements (comments aside), the Python version
# and uv's version. A changed requirements file therefore gets a new venv and never
# replaces one: two work trees sharing .tools (or one switching branches)
# never delete each other's. An install holds a lock on its venv, writes
# .installed last, and a venv without .installed (an install that was
# stopped) is removed and made again, under the lock. Old venvs stay until
# `make clean`. .tools/venv-NAME is a symbolic link to the newest, for
# people typing paths; the Makefile and the scripts use the keyed path.
#
# uv does not read pip's configuration. Where the machine's TLS goes through
# its own CA, pip is configured with that CA bundle (`pip config list`
# shows cert=...); uv is pointed at the same file with SSL_CERT_FILE, unless
# SSL_CERT_FILE is set already.
#
# Env: TOOLS (default <repo>/.tools), PYTHON (default python3),
# UV_CACHE_DIR and PIP_CACHE_DIR (the caches; default: the user's).
set -euo pipefail

UV_VERSION=0.13.8

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${TOOLS:-$ROOT/.tools}"
PYTHON="${PYTHON:-python3}"

die() { echo "venv.sh: $*" >&2; exit 1; }

[[ $# -eq 2 ]] || die "usage: $0 {path|install} NAME"
NAME="$2"
[[ "$NAME" =~ ^[a-z0-9-]+$ ]] || die "NAME must be lower-case letters, digits or -: got $NAME"
REQ="$ROOT/tools/requirements-$NAME.txt"
[[ -f "$REQ" ]] || die "$REQ not found"

venv_path() {
	local pyver key
	pyver="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])')" || die "$PYTHON does not run"
	# Comments and blank lines do not count: editing a comment keeps the venv.
	key="$( { sed -e 's/^[[:space:]]*#.*//' -e 's/[[:space:]]\+#.*//' -e 's/[[:space:]]*$//' "$REQ" | grep -v '^$'; echo "python $pyver"; echo "uv $UV_VERSION"; } | sha256sum | cut -c1-12)"
	echo "$TOOLS/venv-$NAME-$key"
}

# The CA bundle pip is configured with, if any.
pip_cert() {
	"$PYTHON" -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.cert='\(.*\)'$/\1/p" | head -n 1
}

# uv itself, installed once per version (under its own lock).
uv_bin() {
	local dir="$TOOLS/uv-$UV_VERSION"
	if [[ ! -f "$dir/.installed" ]]; then
		mkdir -p "$TOOLS"
		(
			flock 9
			if [[ ! -f "$dir/.installed" ]]; then
				rm -rf "$dir"
				"$PYTHON" -m pip install -q --disable-pip-version-check --no-input --root-user-action=ignore --target "$dir" "uv==$UV_VERSION" >&2
				touch "$dir/.installed"
			fi
		) 9>"$dir.lock"
	fi
	echo "$dir/bin/uv"
}

do_install() {
	local venv uv cert
	venv="$(venv_path)"
	if [[ -f "$venv/.installed" ]]; then
		link "$venv"
		echo "$venv"
		return
	fi
	mkdir -p "$TOOLS"
	uv="$(uv_bin)"
	if [[ -z "${SSL_CERT_FILE:-}" ]]; then
		cert="$(pip_cert)"
		if [[ -n "$cert" ]]; then
			export SSL_CERT_FILE="$cert"
		fi
	fi
	(
		flock 9
		if [[ ! -f "$venv/.installed" ]]; then
			rm -rf "$venv"
			# No managed Python downloads: the venv uses $PYTHON. No byte-code
			# either: compiling every module took 26 s of CPU for moto alone
			# (5,555 modules); the tools compile the few hundred they import
			# on their first start instead (moto.sh and SAM_ENV let Python
			# write byte-code even where PYTHONDONTWRITEBYTECODE is set).
			UV_PYTHON_DOWNLOADS=never "$uv" venv -q --python "$PYTHON" "$venv" >&2
			UV_PYTHON_DOWNLOADS=never "$uv" pip install -q --python "$venv/bin/python" -r "$REQ" >&2
			touch "$venv/.installed"
		fi
	) 9>"$venv.lock"
	link "$venv"
	echo "$venv"
}

# link points .tools/venv-NAME at venv, unless that name is a directory of
# the old layout (a work tree's make from before the keyed venvs).
link() {
	local l="$TOOLS/venv-$NAME"
	if [[ -L "$l" || ! -e "$l" ]]; then
		ln -sfn "$(basename "$1")" "$l.tmp.$$" && mv -Tf "$l.tmp.$$" "$l"
	fi
}

case "$1" in
path) venv_path ;;
install) do_install ;;
*) die "usage: $0 {path|install} NAME" ;;
esac
