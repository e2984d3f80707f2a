#!/bin/sh
# BatchScope's two commands on a fresh Linux or macOS machine (README, first lines):
#   ./batchscope.sh demo [GUI OPTIONS…]    set up (first time only), open the app on its demo
#                                          (options: batchscope gui --help)
#   ./batchscope.sh test [PYTEST OPTIONS…] set up (first time only), run the fast tier of tests
#   ./batchscope.sh test --all [OPTIONS…]  every test, the slow tier too (what .ci/run calls)
#   ./batchscope.sh setup                  the set-up alone
#   ./batchscope.sh triton                 set up Triton's server for --backend triton
#                                          (`test --all` does it too, on Linux x86_64)
# Set-up: a .venv made by python3 (3.11+; PYTHON=python3.12 picks another), torch==2.13.0
# (CI's CPU pin) unless the venv already has a torch (your CUDA build is kept), then
# `pip install -e ".[dev]"`. A marker in .venv records what was installed for which
# pyproject.toml, so a second run skips straight to the command and a changed
# pyproject.toml reinstalls. Plain POSIX sh: a fresh Debian or macOS has no make.
# Triton (--backend triton, plan --verify --on triton): the nvidia-pytriton wheel's server in
# an environment of its own, .venv-triton (it needs numpy<2; BatchScope has numpy 2), with
# onnxruntime for its Python backend; about 450 MB, made once (a marker as above).
set -eu
cd "$(dirname "$0")"

VENV=.venv
TORCH=torch==2.13.0
MARKER=$VENV/.batchscope-setup
TRITON_VENV=.venv-triton
TRITON_PACKAGES="nvidia-pytriton==0.7.0 numpy<2 onnxruntime>=1.17"

say() { printf 'batchscope.sh: %s\n' "$*"; }
die() {
    printf 'batchscope.sh: error: %s\n' "$*" >&2
    exit 1
}

make_venv() {
    py=${PYTHON:-python3}
    command -v "$py" >/dev/null 2>&1 ||
        die "$py not found: install Python 3.11+ (Debian/Ubuntu: sudo apt install python3 python3-venv)"
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
        die "$py is Python $("$py" -c 'import platform; print(platform.python_version())'), BatchScope needs 3.11+: PYTHON=python3.12 $0 $COMMAND"
    say "creating $VENV with $py ($("$py" -c 'import platform; print(platform.python_version())'))"
    if ! "$py" -m venv "$VENV"; then
        rm -rf "$VENV" # a venv without pip would pass the check above next time
        die "$py -m venv failed (Debian/Ubuntu: sudo apt install python3-venv)"
    fi
}

setup() {
    want="$TORCH $(cksum <pyproject.toml)"
    if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$want" ] && [ -x "$VENV/bin/batchscope" ]; then
        say "set-up is up to date ($VENV; redone when pyproject.toml changes)"
        return
    fi
    [ -x "$VENV/bin/python" ] || make_venv
    if "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
        say "torch is already in $VENV: keeping it"
    else
        say "installing $TORCH into $VENV (CI's pin; for a CUDA build see README 'Set up by hand')"
        "$VENV/bin/python" -m pip install "$TORCH" ||
            die "pip install $TORCH failed (pip's message is above)"
    fi
    say "installing BatchScope and its test tools: pip install -e \".[dev]\""
    "$VENV/bin/python" -m pip install -e ".[dev]" ||
        die "pip install -e \".[dev]\" failed (pip's message is above)"
    printf '%s\n' "$want" >"$MARKER"
    say "set-up done"
}

python_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }

triton_setup() {
    marker=$TRITON_VENV/.batchscope-setup
    if [ -f "$marker" ] && [ "$(cat "$marker")" = "$TRITON_PACKAGES" ]; then
        say "Triton set-up is up to date ($TRITON_VENV)"
        return
    fi
    [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] ||
        die "Triton's server (the nvidia-pytriton wheel) is for Linux x86_64; this is $(uname -s) $(uname -m)"
    py=${PYTHON:-python3}
    if [ ! -x "$TRITON_VENV/bin/python" ]; then
        say "creating $TRITON_VENV with $py for Triton's server"
        "$py" -m venv "$TRITON_VENV" || {
            rm -rf "$TRITON_VENV"
            die "$py -m venv failed (Debian/Ubuntu: sudo apt install python3-venv)"
        }
    fi
    say "installing Triton's server into $TRITON_VENV: pip install $TRITON_PACKAGES (about 450 MB)"
    # shellcheck disable=SC2086 # the packages are words
    "$TRITON_VENV/bin/python" -m pip install $TRITON_PACKAGES ||
        die "pip install into $TRITON_VENV failed (pip's message is above)"
    version=$(python_version "$TRITON_VENV/bin/python")
    stub=$(ls "$TRITON_VENV"/lib/python*/site-packages/pytriton/tritonserver/python_backend_stubs/"$version"/triton_python_backend_stub 2>/dev/null || true)
    [ -n "$stub" ] || die "the nvidia-pytriton wheel has no Python backend for Python $version"
    if ldd "$stub" | grep -q "not found"; then
        die "Triton's Python backend needs the system's libpython$version (Debian/Ubuntu: sudo apt install libpython$version)"
    fi
    printf '%s\n' "$TRITON_PACKAGES" >"$marker"
    say "Triton set-up done"
}

COMMAND=${1:-}
[ $# -gt 0 ] && shift
case $COMMAND in
demo)
    setup
    say "opening the app: batchscope gui $*"
    exec "$VENV/bin/batchscope" gui "$@"
    ;;
test)
    setup
    case " $* " in
    *" --all "*)
        # the slow tier has Triton's tests (the fast one none): its server, set up once
        if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ]; then
            triton_setup
        else
            say "no Triton on $(uname -s) $(uname -m): its tests skip"
        fi
        say "running every test: python -m pytest $*"
        ;;
    *) say "running the fast tier: python -m pytest $* (--all: every test)" ;;
    esac
    exec "$VENV/bin/python" -m pytest "$@"
    ;;
setup) setup ;;
triton) triton_setup ;;
*)
    printf 'usage: %s demo|test|setup|triton [OPTIONS…]  (demo: the app; test: pytest)\n' "$0" >&2
    exit 2
    ;;
esac
