#!/usr/bin/env bash
# The workbook's single entry point. The first run creates .venv and installs the
# harness with its dependencies; later runs reuse it. `./check.sh --help` lists commands.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"

pick_python() {
    if [ -n "${WORKBOOK_PYTHON:-}" ]; then echo "$WORKBOOK_PYTHON"; return; fi
    for c in python3 python3.13 python3.12 python3.11 python3.10; do
        if command -v "$c" >/dev/null 2>&1 &&
           "$c" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
            echo "$c"; return
        fi
    done
    echo "check.sh: Python 3.10 or newer is needed (set WORKBOOK_PYTHON)" >&2
    exit 2
}

# Which extras this command needs: the selftest uses test-only oracles (real tornado).
extra=""
case "${1:-}" in
    selftest) extra="dev" ;;
    bench) extra="bench" ;;
    grade|gradescope-bundle) extra="grade" ;;
    mutate) extra="mutate" ;;
    serve|site) extra="web" ;;
esac
case " $* " in  # a check with --watch needs watchfiles
    *" --watch "*) [ -z "$extra" ] && extra="watch" ;;
esac
extras="${extra:+[$extra]}"
stamp="$venv/.installed${extra:+-$extra}"
want="$(cat "$here/pyproject.toml" | cksum)"

bootstrap() {
    if [ ! -x "$venv/bin/python" ]; then
        echo "check.sh: first run — creating .venv (takes a minute, once)…" >&2
        "$(pick_python)" -m venv "$venv"
    fi
    echo "check.sh: installing the workbook${extras:+ with $extras}…" >&2
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            -e "$here$extras" >"$venv/install.log" 2>&1; then
        if [ "$extras" = "[bench]" ]; then  # peers are optional: fall back to the core
            echo "check.sh: some benchmark peers did not install (see .venv/install.log)" >&2
            "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$here" \
                >>"$venv/install.log" 2>&1 || { cat "$venv/install.log" >&2; exit 2; }
        else
            cat "$venv/install.log" >&2
            echo "check.sh: installing failed (log: .venv/install.log)" >&2
            exit 2
        fi
    fi
    echo "$want" >"$stamp"
}

installed() {  # is what this command needs there? (a plain command is served by any install)
    [ -x "$venv/bin/python" ] || return 1
    local others=""
    [ -z "$extra" ] && others="$(ls "$venv"/.installed-* 2>/dev/null)"  # any install serves
    [ "$extra" = "watch" ] && others="$venv/.installed-dev"
    for s in "$stamp" $others; do
        [ "$(cat "$s" 2>/dev/null)" = "$want" ] && return 0
    done
    return 1
}

# Grading as root sandboxes each run with bubblewrap where it is installed (else a fallback
# with fewer guarantees, see the README's isolation section): install it once if apt can.
if [ "${1:-}" = grade ] && [ "$(id -u)" = 0 ] && ! command -v bwrap >/dev/null 2>&1 &&
        command -v apt-get >/dev/null 2>&1; then
    echo "check.sh: installing bubblewrap for the grader's sandbox…" >&2
    if ! { apt-get install -y --no-install-recommends bubblewrap ||
           { apt-get update && apt-get install -y --no-install-recommends bubblewrap; }; } \
            >/dev/null 2>&1; then
        echo "check.sh: could not install bubblewrap; grading uses the fallback sandbox" >&2
    fi
fi

if ! installed; then
    mkdir -p "$venv"
    if command -v flock >/dev/null 2>&1; then
        # Two first runs at once: the second waits for the first, then finds it done.
        exec 9>"$venv/.bootstrap.lock"
        flock 9
        installed || bootstrap
        flock -u 9
    else
        bootstrap
    fi
fi
exec "$venv/bin/python" -m workbook "$@"
