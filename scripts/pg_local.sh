#!/usr/bin/env bash
# pg_local.sh - a throwaway PostgreSQL server for tests and local runs.
#
# Installs PostgreSQL from the Debian packages when it is missing, creates a cluster in its own
# directory, and starts it on a loopback port as a plain background process (no systemd). The
# server listens on 127.0.0.1 only, trusts every local connection (user postgres, no password)
# and, unless PG_DURABLE=1, runs with fsync off: it is for disposable data only.
#
#   scripts/pg_local.sh start         install if needed, initdb if needed, start (idempotent)
#   scripts/pg_local.sh stop          stop the server (fast shutdown)
#   scripts/pg_local.sh stop --wipe   stop it and delete its directory
#   scripts/pg_local.sh env           print export lines (PGHOST, PGPORT, PGUSER, TBX_PG_URL)
#
# Settings (environment):
#   PG_LOCAL_DIR  cluster directory; must be reachable by user postgres. Default /dev/shm/tbx-pg
#                 when /dev/shm is a writable tmpfs, else /tmp/tbx-pg. On tmpfs a clone
#                 (CREATE DATABASE ... TEMPLATE, ~300 files) took ~9 ms; on this VM's ext4 disk
#                 25-300 ms, growing as the disk's write budget ran out.
#   PG_PORT       TCP port on 127.0.0.1 (default 55432, away from a system cluster on 5432). When
#                 the default is taken by another program, start picks the next free port, says so
#                 and prints that URL (kept in $PG_LOCAL_DIR/port for stop and env); a PG_PORT you
#                 set that is taken stops start with an error, never a server on another port.
#   PG_DURABLE=1  keep fsync, synchronous_commit and full_page_writes on
#
# Run it as root: it installs packages and runs the server as user postgres (initdb and pg_ctl
# refuse to run as root). As another user it skips the install and runs the server as that user.
# The admin URL is postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/postgres
set -euo pipefail

default_dir() {
  if [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
    echo /dev/shm/tbx-pg
  else
    echo /tmp/tbx-pg
  fi
}
DIR=${PG_LOCAL_DIR:-$(default_dir)}
PORT=${PG_PORT:-$(cat "$DIR/port" 2>/dev/null || echo 55432)}
DATA=$DIR/data
LOG=$DIR/server.log
MARK=$DIR/.tbx-pg-local   # marks a directory this script created, so --wipe never deletes others
URL="postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"

say() { printf 'pg_local: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  if [ -f "$LOG" ]; then say "last lines of $LOG:"; tail -n 15 "$LOG" >&2; fi
  exit 1
}

# Something accepts connections on 127.0.0.1:$1 (bash's /dev/tcp: no extra tool needed).
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Refuse a taken PG_PORT; move off a taken default to the next free port (and remember it).
choose_port() {
  port_taken "$PORT" || return 0
  [ -z "${PG_PORT:-}" ] || die "port $PORT on 127.0.0.1 is taken by another program; set PG_PORT to a free port"
  local taken=$PORT
  while port_taken "$PORT"; do
    PORT=$((PORT + 1))
    [ "$PORT" -lt $((taken + 100)) ] || die "ports $taken-$PORT on 127.0.0.1 are all taken; set PG_PORT to a free port"
  done
  URL="postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
  say "port $taken is taken by another program: using port $PORT instead (TBX_PG_URL=$URL)"
}

# The newest installed server binaries; Debian keeps them out of PATH.
find_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

install_server() {
  [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed and only root can install it (apt-get install postgresql)"
  command -v apt-get >/dev/null || die "PostgreSQL is not installed and this is not a Debian-like system"
  say "installing postgresql from the Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  # The package's postinst would start its own cluster; policy-rc.d usually stops that in containers,
  # and it listens on 5432, not on our port, so it does not matter either way.
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends postgresql postgresql-client >/dev/null
}

write_settings() {
  # postgresql.auto.conf is read last, so these win over postgresql.conf; rewritten before each start.
  {
    echo "listen_addresses = '127.0.0.1'"
    echo "port = $PORT"
    echo "unix_socket_directories = '$DIR'"   # Debian's /var/run/postgresql may not exist without systemd
    echo "max_connections = 200"
    if [ "${PG_DURABLE:-0}" != 1 ]; then
      echo "fsync = off"
      echo "synchronous_commit = off"
      echo "full_page_writes = off"
    fi
  } >"$DATA/postgresql.auto.conf"
  {
    echo "# written by pg_local.sh: trust on loopback only (throwaway server)"
    echo "local all all trust"
    echo "host  all all 127.0.0.1/32 trust"
  } >"$DATA/pg_hba.conf"
  if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$DATA/postgresql.auto.conf" "$DATA/pg_hba.conf"; fi
}

init_cluster() {
  local bin=$1
  if [ "$(id -u)" = 0 ]; then
    install -d -o postgres -g postgres -m 0755 "$DIR"
    runuser -u postgres -- test -x "$DIR" \
      || die "user postgres cannot enter $DIR (a parent directory is private); choose another PG_LOCAL_DIR"
  else
    install -d -m 0755 "$DIR"
  fi
  rm -rf "$DATA"
  as_owner touch "$MARK"
  as_owner "$bin/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C >"$DIR/initdb.log" 2>&1 \
    || { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
  say "created a cluster in $DATA"
}

start() {
  local bin
  bin=$(find_bin)
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    install_server
    bin=$(find_bin)
    [ -n "$bin" ] || die "postgresql installed, but no /usr/lib/postgresql/*/bin found"
  fi
  if as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    local running_port
    running_port=$(sed -n 4p "$DATA/postmaster.pid")
    [ "$running_port" = "$PORT" ] \
      || die "$DATA already runs on port $running_port, not $PORT; stop it first or set PG_PORT=$running_port"
    say "already running on 127.0.0.1:$PORT ($DATA)"
  else
    choose_port
    [ -s "$DATA/PG_VERSION" ] || init_cluster "$bin"
    as_owner sh -c "echo $PORT > '$DIR/port'"
    write_settings
    # -w waits until it accepts connections; its output goes to the log, not the caller's pipe.
    as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 30 start </dev/null >/dev/null 2>&1 \
      || die "the server did not start (is port $PORT taken? see the log)"
    say "started $("$bin/postgres" --version) on 127.0.0.1:$PORT"
  fi
  "$bin/pg_isready" -q -h 127.0.0.1 -p "$PORT" || die "the server runs but does not accept connections on $PORT"
  echo "$URL"
}

stop() {
  local bin
  bin=$(find_bin)
  if [ -n "$bin" ] && [ -f "$DATA/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w -t 30 stop >/dev/null 2>&1 && say "stopped" || say "was not running"
  else
    say "was not running"
  fi
  if [ "${1:-}" = --wipe ] && [ -d "$DIR" ]; then
    [ -f "$MARK" ] || die "$DIR was not created by pg_local.sh; not deleting it"
    rm -rf "$DIR"
    say "deleted $DIR"
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  env)
    echo "export PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres"
    echo "export TBX_PG_URL=$URL"
    ;;
  *) echo "usage: $0 start | stop [--wipe] | env" >&2; exit 2 ;;
esac
