// One run: its state, conf and timing; every task's state (a mapped task's instances
// counted per state), try, times and first error; its streams in brief; and for admins
// "clear" of the run or of its failed tasks.

import { api, live, p } from "../api.js";
import { breakable } from "../components.js";
import { badge, countsBar, duration, errorBox, h, json, num, replace, runDuration, when } from "../dom.js";
import { pendingRequests, waitingNotice } from "../hitl.js";
import { dagHref, runHref, streamsHref, taskHref } from "../links.js";
import { timeline } from "../timeline.js";

const FAILED = ["failed", "upstream_failed"];

export async function render(root, { dagId, runId }, _query, ctx) {
  document.title = `${runId} · ${dagId} · Tailrace`;
  const structure = await api(p`/ui/dags/${dagId}/structure`).catch(() => null);
  const view = h("div");
  // The outcome of the last clear outlives the snapshots that redraw the page around it.
  const message = h("div");
  // Human-in-the-loop tasks of this run waiting for a response, asked again while any
  // task is deferred.
  const waiting = h("div");
  const askWaiting = async (tasks) => {
    const deferred = tasks.some((t) => t.counts.deferred);
    const requests = deferred ? (await pendingRequests(dagId)).filter((r) => r.dag_run_id === runId) : [];
    replace(waiting, waitingNotice(requests, dagId, runId));
  };
  root.append(view);
  const gantt = h("div");
  // The timeline is read again with each snapshot (at most once a second while it moves).
  let fetched = 0;
  const refresh = async (snapshot) => {
    if (Date.now() - fetched < 1000 && snapshot.run.state === "running") return;
    fetched = Date.now();
    const data = await api(p`/ui/dags/${dagId}/runs/${runId}/timeline`).catch(() => null);
    if (data) replace(gantt, timeline(data));
  };
  ctx.onLeave(
    live(p`/ui/dags/${dagId}/runs/${runId}/events`, (snapshot) => {
      replace(view, page(snapshot, dagId, runId, structure, ctx, message, gantt, waiting));
      refresh(snapshot);
      askWaiting(snapshot.tasks).catch(() => {});
    }),
  );
}

function page({ run, tasks, streams }, dagId, runId, structure, ctx, message, gantt, waiting) {
  const failed = tasks.filter((t) => FAILED.some((st) => t.counts[st])).map((t) => t.task_id);
  const clear = async (taskIds) => {
    const what = taskIds
      ? `Clear the failed tasks of run ${runId} (${taskIds.join(", ")})? Their failed and upstream-failed instances run again.`
      : `Clear every task of run ${runId}? They run again.`;
    if (!confirm(what)) return;
    try {
      const body = taskIds ? { task_ids: taskIds, only_failed: true } : undefined;
      const result = await api(p`/dags/${dagId}/runs/${runId}/clear`, { method: "POST", body });
      replace(message, h("div", { className: "notice", id: "clear-notice" }, `${num(result.cleared)} task instances cleared; the scheduler runs them again.`));
    } catch (error) {
      replace(message, errorBox(error));
    }
  };
  // Replay: a consumer of this finished run's streams runs again, as its DAG is now.
  const streamTasks = new Set(streams.map((st) => st.task_id));
  const consumers = (structure?.tasks ?? []).filter((t) => t.upstream.some((u) => streamTasks.has(u))).map((t) => t.task_id);
  const finished = run.state === "success" || run.state === "failed";
  const replay = async () => {
    const taskId = prompt(`Replay which consumer over the streams of ${runId}? It and every task after it run again, as the DAG is now; the tasks before it do not (their outputs are copied).`, consumers[0]);
    if (!taskId) return;
    try {
      const created = await api(p`/dags/${dagId}/runs/${runId}/replay`, { method: "POST", body: { task_id: taskId } });
      location.hash = runHref(dagId, created.run_id);
    } catch (error) {
      replace(message, errorBox(error));
    }
  };
  return [
    h(
      "div",
      { className: "page-head" },
      h(
        "div",
        {},
        h("div", { className: "crumbs" }, h("a", { href: "#/" }, "DAGs"), " / ", h("a", { href: dagHref(dagId) }, dagId), " / "),
        h("h1", {}, runId, " ", badge(run.state)),
      ),
      h(
        "div",
        { className: "head-actions" },
        streams.length ? h("a", { className: "button", href: streamsHref(dagId, runId), id: "stream-view-link" }, "≋ Stream view") : null,
        ctx.isAdmin && finished && consumers.length
          ? h("button", { className: "button", id: "replay-run", title: "Run a consumer again over this run's recorded streams", onclick: replay }, "↻ Replay")
          : null,
        ctx.isAdmin && failed.length
          ? h("button", { className: "danger-ghost", id: "clear-failed", onclick: () => clear(failed) }, `Clear failed tasks (${failed.length})`)
          : null,
        ctx.isAdmin ? h("button", { className: "danger-ghost", id: "clear-run", onclick: () => clear(null) }, "Clear run") : null,
      ),
    ),
    message,
    waiting,
    h(
      "div",
      { className: "columns" },
      h(
        "div",
        { className: "card tasks-card" },
        h("h2", {}, "Tasks"),
        runTasks(dagId, runId, tasks, structure, run),
      ),
      h(
        "aside",
        { className: "side" },
        h(
          "div",
          { className: "card" },
          h("h2", {}, "Run"),
          h(
            "dl",
            { className: "facts" },
            h("dt", {}, "Type"), h("dd", {}, run.run_type),
            run.replay_of ? [h("dt", {}, "Replay of"), h("dd", { id: "replay-of" }, h("a", { href: runHref(dagId, run.replay_of) }, run.replay_of))] : null,
            h("dt", {}, "Queued"), h("dd", {}, when(run.queued_at)),
            h("dt", {}, "Started"), h("dd", {}, run.start_date ? when(run.start_date) : "not yet"),
            h("dt", {}, "Ended"), h("dd", {}, run.end_date ? when(run.end_date) : "–"),
            h("dt", {}, "Duration"), h("dd", {}, duration(runDuration(run))),
            h("dt", {}, "Conf"), h("dd", {}, h("pre", { className: "conf" }, json(run.conf))),
          ),
        ),
        run.deadlines.length ? deadlinesCard(run.deadlines) : null,
        streams.length
          ? h(
              "div",
              { className: "card" },
              h("h2", {}, "Streams"),
              streams.map((st) =>
                h(
                  "p",
                  {},
                  h("a", { href: streamsHref(dagId, runId) }, st.task_id),
                  ` — ${num(st.produced)} events, ${num(st.pending)} pending, ${num(st.items)} items`,
                  st.paused_by_backpressure ? h("span", { className: "pill warn" }, "paused by backpressure") : null,
                ),
              ),
            )
          : null,
      ),
    ),
    gantt,
    h("p", { className: "muted small" }, "This page updates by itself as the run moves."),
  ];
}

// The run's deadline alerts: when each passes, and a missed one's callback and its end.
function deadlinesCard(deadlines) {
  return h(
    "div",
    { className: "card", id: "deadlines" },
    h("h2", {}, "Deadlines"),
    deadlines.map((d) =>
      h(
        "p",
        { className: d.missed ? "deadline missed" : "deadline" },
        d.missed ? h("span", { className: "pill warn" }, "missed") : h("span", { className: "pill" }, "pending"),
        ` ${d.name || "deadline"} — `,
        when(d.deadline_time),
        d.missed ? ` · ${d.callback} callback ${d.callback_state || "pending"}` : null,
        d.callback_error ? errorBox(d.callback_error) : null,
      ),
    ),
  );
}

// Each task: its state (a mapped task: its instances per state), latest try, when it
// started, how long it took (so far), and the first line of its first failed instance's error.
function runTasks(dagId, runId, tasks, structure, run) {
  const live = run.state === "running" || run.state === "queued";
  const info = Object.fromEntries((structure?.tasks ?? []).map((t) => [t.task_id, t]));
  return h(
    "table",
    { className: "table tasks", id: "task-table" },
    h("thead", {}, h("tr", {}, ["Task", "State", "Try", "Started", "Duration", "Error"].map((c) => h("th", {}, c)))),
    h(
      "tbody",
      {},
      tasks.map((t) => {
        const task = info[t.task_id];
        const kind = task?.mapped;
        const elapsed = t.duration ?? (live && t.start_date ? (Date.now() - Date.parse(t.start_date)) / 1000 : null);
        return h(
          "tr",
          { dataset: { task: t.task_id } },
          h(
            "td",
            {},
            h("a", { href: taskHref(dagId, runId, t.task_id) }, breakable(t.task_id)),
            kind ? h("span", { className: `kind kind-${kind}` }, kind === "iterate" ? "iterate" : "mapped") : null,
            task?.starts_in_triggerer ? h("span", { className: "kind kind-trigger" }, "triggerer") : null,
            task ? h("div", { className: "muted small operator" }, task.operator_name) : null,
          ),
          h("td", { className: "state-cell" }, kind || t.total > 1 ? countsBar(t.counts) : badge(t.state)),
          h("td", { className: "try" }, t.try_number || "–"),
          h("td", { className: "nowrap" }, t.start_date ? when(t.start_date) : "–"),
          h("td", { className: "nowrap duration" }, elapsed === null ? "–" : `${duration(elapsed)}${t.duration === null ? " so far" : ""}`),
          h(
            "td",
            { className: "error-summary" },
            t.error
              ? h(
                  "a",
                  { href: taskHref(dagId, runId, t.task_id, t.error_map_index >= 0 ? t.error_map_index : null), title: `${t.error}\n(open the failed instance)` },
                  t.error_map_index >= 0 ? h("span", { className: "muted" }, `[${t.error_map_index}] `) : null,
                  t.error,
                )
              : "",
          ),
        );
      }),
    ),
  );
}
