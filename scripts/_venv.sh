# Shared by scripts/test, scripts/demo and scripts/bench: create or reuse .venv
# and install git-mgit (editable) with the extras a script needs.
# Usage: source scripts/_venv.sh; ensure_venv "test,runtime"
ensure_venv() {
    local extras="$1" root
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    if [ ! -x "$root/.venv/bin/python" ]; then
        python3 -m venv "$root/.venv"
        "$root/.venv/bin/python" -m pip install -q --upgrade pip
    fi
    local stamp="$root/.venv/.installed-${extras//,/-}" stale=0 f
    # Reinstall when the build inputs changed: metadata, or the C kernels to compile.
    for f in pyproject.toml setup.py git_mgit/codecs/_native.c; do
        [ -f "$stamp" ] && [ ! "$root/$f" -nt "$stamp" ] || stale=1
    done
    if [ "$stale" = 1 ]; then
        # torch is pinned exactly in pyproject: a range would pull CUDA wheels.
        "$root/.venv/bin/python" -m pip install -q -e "$root[$extras]"
        touch "$stamp"
    fi
    # pip byte-compiles what it installs, but not an editable install's sources: with
    # PYTHONDONTWRITEBYTECODE set (CI containers), every git-mgit process that git starts
    # (filters, hooks) would compile them again, about 60 ms a start. Up-to-date files are skipped.
    # Every folder the package maps (pyproject's package-dir), not only git_mgit/.
    "$root/.venv/bin/python" -m compileall -q -j 0 "$root/git_mgit" "$root/filters" \
        "$root/hooks" "$root/runtime" >/dev/null
    export PATH="$root/.venv/bin:$PATH"
}

# git-lfs is only a baseline for benchmarks and migration tests.
ensure_git_lfs() {
    command -v git-lfs >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq git-lfs >/dev/null
    else
        echo "git-lfs is missing: install it (apt-get install git-lfs)" >&2
        return 1
    fi
}
