# bench/lib.sh - sourced by the bench scripts (shm-bw.sh, shm-compare.sh): starting an
# xfer-perf server and running a client against a server that may not listen yet.

# xfer_server SLOG CMD...: starts `CMD... --json server` in the background, its output
# in SLOG, and waits for its name: sets XFER_SERVER_PID and XFER_SERVER_NAME; returns 1
# (with a line on stderr, the server stopped) when it did not start.
xfer_server() {
    local slog=$1
    shift
    # Emptied here, before the server starts: its own redirection may come after the
    # first look below, which would then find the last run's name.
    : >"$slog"
    "$@" --json server >"$slog" 2>&1 &
    XFER_SERVER_PID=$!
    XFER_SERVER_NAME=
    for _ in $(seq 200); do
        XFER_SERVER_NAME=$(awk '/^xfer-perf server:/ { print $3; exit }' "$slog")
        [[ -n $XFER_SERVER_NAME ]] && return 0
        kill -0 "$XFER_SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "xfer-perf server did not start: $(tail -n 3 "$slog")" >&2
    kill "$XFER_SERVER_PID" 2>/dev/null || true
    wait "$XFER_SERVER_PID" 2>/dev/null || true
    return 1
}

# client_retry SRV_PID CMD...: runs the client CMD until it succeeds, while the server
# SRV_PID lives (a client fails at once while its server is not listening yet; bounded),
# then prints the client's last line and reaps the server; prints nothing and stops the
# server when the client never succeeded.
client_retry() {
    local srv=$1 out
    shift
    for _ in $(seq 100); do
        if out=$("$@" 2>/dev/null); then
            wait "$srv" || true
            tail -n 1 <<<"$out"
            return 0
        fi
        kill -0 "$srv" 2>/dev/null || break
        sleep 0.1
    done
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    return 1
}
