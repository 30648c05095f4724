#!/usr/bin/env bash
# The distributed quick start of docs/deployment.md, on one machine: one api-server, a
# scheduler, a triggerer and a Celery worker, each in an environment of its own, as
# they would be on separate machines. tests/distributed/test_quickstart.py runs it.
#
#   TAILRACE_DATABASE_URL=postgresql://… TAILRACE_CELERY_BROKER_URL=redis://… \
#   TAILRACE_DAGS_FOLDER=/srv/dags deploy/quickstart.sh
#
# Ctrl-C (or SIGTERM) stops every component. Optional: TAILRACE_HOME (default
# ./tailrace-home), TAILRACE_API_PORT (8080), TAILRACE_SECRET_KEY (made here), WORKERS (1).
set -euo pipefail

: "${TAILRACE_DATABASE_URL:?the PostgreSQL database: postgresql://USER:PASSWORD@HOST/DB}"
: "${TAILRACE_CELERY_BROKER_URL:?the broker: redis://HOST:6379/0 or amqp://USER:PASSWORD@HOST//}"
: "${TAILRACE_DAGS_FOLDER:?the DAG files, at the same path for every component}"
home=${TAILRACE_HOME:-$PWD/tailrace-home}
port=${TAILRACE_API_PORT:-8080}
secret=${TAILRACE_SECRET_KEY:-$(openssl rand -hex 32)}
mkdir -p "$home"

# What every component reads: no credentials but the broker's.
shared=(
  PATH="$PATH"
  PYTHONPATH="${PYTHONPATH:-}"
  TAILRACE_HOME="$home"
  TAILRACE_EXECUTOR=celery
  TAILRACE_DAGS_FOLDER="$TAILRACE_DAGS_FOLDER"
  TAILRACE_CELERY_BROKER_URL="$TAILRACE_CELERY_BROKER_URL"
  TAILRACE_API_PORT="$port"
  TAILRACE_EXECUTION_API_URL="http://127.0.0.1:$port"
)
# The api-server, schedulers and triggerers: the database, and the key that signs tries.
owners=(TAILRACE_DATABASE_URL="$TAILRACE_DATABASE_URL" TAILRACE_SECRET_KEY="$secret")

pids=()
stop() {
  trap - INT TERM EXIT
  if ((${#pids[@]})); then kill -TERM "${pids[@]}" 2>/dev/null || true; fi
  wait
}
trap stop INT TERM EXIT

env -i "${shared[@]}" "${owners[@]}" tailrace db migrate
env -i "${shared[@]}" "${owners[@]}" tailrace api-server & pids+=($!)
env -i "${shared[@]}" "${owners[@]}" tailrace scheduler & pids+=($!)
env -i "${shared[@]}" "${owners[@]}" tailrace triggerer & pids+=($!)
for _ in $(seq "${WORKERS:-1}"); do
  # No database credentials, no secret key: a worker reports to the execution API.
  env -i "${shared[@]}" tailrace worker --queues default --concurrency 2 & pids+=($!)
done
# A component that exits stops the others (a supervisor would start it again).
wait -n
echo "quickstart: a component exited; stopping the others" >&2
exit 1
