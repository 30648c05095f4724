// One run: its state, conf and timing, every task's state (a mapped task's instances
// counted per state), its streams in brief, and "clear" for admins.

import { api, live, p } from "../api.js";
import { taskTable } from "../components.js";
import { badge, duration, errorBox, h, json, num, replace, runDuration, when } from "../dom.js";
import { dagHref, streamsHref } from "../links.js";

export async function render(root, { dagId, runId }, _query, ctx) {
  document.title = `${runId} · ${dagId} · Tailrace`;
  const structure = await api(p`/ui/dags/${dagId}/structure`).catch(() => null);
  const view = h("div");
  root.append(view);
  ctx.onLeave(live(p`/ui/dags/${dagId}/runs/${runId}/events`, (snapshot) => replace(view, page(snapshot, dagId, runId, structure, ctx))));
}

function page({ run, tasks, streams }, dagId, runId, structure, ctx) {
  const message = h("div");
  const clear = async () => {
    if (!confirm(`Clear every task of run ${runId}? They run again.`)) return;
    try {
      const result = await api(p`/dags/${dagId}/runs/${runId}/clear`, { method: "POST" });
      replace(message, h("div", { className: "notice" }, `${num(result.cleared)} task instances cleared; the scheduler runs them again.`));
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
        ctx.isAdmin ? h("button", { className: "danger-ghost", id: "clear-run", onclick: clear }, "Clear run") : null,
      ),
    ),
    message,
    h(
      "div",
      { className: "columns" },
      h(
        "div",
        { className: "card" },
        h("h2", {}, "Tasks"),
        taskTable(dagId, runId, tasks, structure),
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
            h("dt", {}, "Queued"), h("dd", {}, when(run.queued_at)),
            h("dt", {}, "Started"), h("dd", {}, run.start_date ? when(run.start_date) : "not yet"),
            h("dt", {}, "Ended"), h("dd", {}, run.end_date ? when(run.end_date) : "–"),
            h("dt", {}, "Duration"), h("dd", {}, duration(runDuration(run))),
            h("dt", {}, "Conf"), h("dd", {}, h("pre", { className: "conf" }, json(run.conf))),
          ),
        ),
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
    h("p", { className: "muted small" }, "This page updates by itself as the run moves."),
  ];
}
