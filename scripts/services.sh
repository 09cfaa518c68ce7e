#!/usr/bin/env bash
# Makes Postgres (PGHOST:PGPORT, default 127.0.0.1:5432) and Redis (REDIS_HOST:REDIS_PORT,
# default 127.0.0.1:6379) reachable. Order of attempts: already running → docker compose (when
# a Docker engine answers) → local server binaries → Debian packages (apt-get, as root).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PGHOST="${PGHOST:-127.0.0.1}"; PGPORT="${PGPORT:-5432}"
REDIS_HOST="${REDIS_HOST:-127.0.0.1}"; REDIS_PORT="${REDIS_PORT:-6379}"

port_open() { (exec 3<>"/dev/tcp/$1/$2") >/dev/null 2>&1; }
wait_port() { for _ in $(seq 1 60); do port_open "$1" "$2" && return 0; sleep 0.5; done; return 1; }
log() { echo "[services] $*" >&2; }

apt_updated=0
apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  if [ $apt_updated = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || true; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

docker_up() {
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 || return 1
  log "starting $1 with docker compose"
  docker compose -f "$ROOT/docker-compose.yml" up -d "$1" >&2
}

start_postgres_local() {
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    log "installing PostgreSQL from Debian's packages"; apt_install postgresql || return 1
  fi
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -n "$(ls /etc/postgresql 2>/dev/null)" ]; then
    local ver; ver="$(ls /etc/postgresql | sort -V | tail -1)"
    # Trust auth on loopback for local development (what this kind of machine ships with).
    local hba="/etc/postgresql/$ver/main/pg_hba.conf"
    if [ -w "$hba" ] && ! grep -q 'gatehouse-local-trust' "$hba"; then
      sed -i '1i host all all 127.0.0.1/32 trust # gatehouse-local-trust\nhost all all ::1/128 trust # gatehouse-local-trust\nlocal all all trust # gatehouse-local-trust' "$hba"
    fi
    log "starting PostgreSQL $ver cluster"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start >&2 || true
    return 0
  fi
  # Non-Debian layout: a private cluster under .gatehouse/pg owned by the current user.
  local bin; bin="$(dirname "$(command -v postgres || ls /usr/lib/postgresql/*/bin/postgres | tail -1)")"
  local data="$ROOT/.gatehouse/pg"
  if [ ! -d "$data" ]; then "$bin/initdb" -D "$data" -U postgres --auth=trust >&2; fi
  log "starting private PostgreSQL in $data"
  "$bin/pg_ctl" -D "$data" -o "-p $PGPORT -k /tmp" -l "$ROOT/.gatehouse/pg.log" start >&2
}

start_redis_local() {
  if ! command -v redis-server >/dev/null 2>&1; then
    log "installing Redis from Debian's packages"; apt_install redis-server || return 1
  fi
  # Append-only file, fsync once a second, as production runs it: queued and delayed jobs, job
  # ids and locks survive a restart of this Redis (docs/decisions/0120-redis-persistence.md).
  local dir="${GATEHOUSE_STATE_DIR:-$ROOT/.gatehouse}/redis"
  mkdir -p "$dir"
  log "starting redis-server (append-only file in $dir)"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" \
    --appendonly yes --appendfsync everysec --maxmemory-policy noeviction \
    --dir "$dir" --logfile "$dir/redis.log" >&2
}

ensure() { # name host port docker-service local-starter
  if port_open "$2" "$3"; then return 0; fi
  docker_up "$4" || "$5" || { log "cannot start $1: install it or set its host/port"; exit 1; }
  wait_port "$2" "$3" || { log "$1 did not come up on $2:$3"; exit 1; }
  log "$1 is up on $2:$3"
}

case "${1:-up}" in
  up)
    ensure PostgreSQL "$PGHOST" "$PGPORT" postgres start_postgres_local
    ensure Redis "$REDIS_HOST" "$REDIS_PORT" redis start_redis_local
    ;;
  *) echo "usage: services.sh up" >&2; exit 2 ;;
esac
