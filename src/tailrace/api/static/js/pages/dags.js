// The DAG list: each DAG's recent runs as coloured dots, its next run, the paused switch and
// a trigger button for admins; files that failed to import on top.

import { api, live } from "../api.js";
import { dot, empty, h, replace, when } from "../dom.js";
import { dagHref, runHref } from "../links.js";
import { pauseToggle, triggerButton } from "./trigger.js";

export async function render(root, _params, _query, ctx) {
  document.title = "DAGs · Tailrace";
  const errors = h("div");
  const table = h("div", { className: "card" }, h("p", { className: "muted pad" }, "Loading …"));
  root.append(h("div", { className: "page-head" }, h("h1", {}, "DAGs")), errors, table);

  api("/import-errors?limit=100").then((page) => {
    if (!page.items.length) return;
    replace(
      errors,
      h(
        "details",
        { className: "banner-error", id: "import-errors" },
        h("summary", {}, `${page.items.length} DAG file${page.items.length > 1 ? "s" : ""} failed to import — click for details`),
        page.items.map((e) =>
          h("div", { className: "import-error" }, h("code", {}, `${e.filename}${e.line ? `:${e.line}` : ""}`), h("p", {}, e.message), h("pre", {}, e.stacktrace)),
        ),
      ),
    );
  });

  ctx.onLeave(live("/ui/dags/events?limit=1000", (page) => replace(table, dagTable(page.items, ctx))));
}

function dagTable(dags, ctx) {
  if (!dags.length) {
    return empty(
      "No DAGs yet",
      "Put a DAG file in the dags folder (see ",
      h("code", {}, "tailrace config"),
      "); the scheduler parses it within seconds and it appears here.",
    );
  }
  return h(
    "table",
    { className: "table", id: "dag-table" },
    h("thead", {}, h("tr", {}, ["", "DAG", "Schedule", "Recent runs", "Last run", "Next run", ""].map((c) => h("th", {}, c)))),
    h(
      "tbody",
      {},
      dags.map((d) => {
        const href = dagHref(d.dag_id);
        const runs = [...d.recent_runs].reverse();
        const latest = d.recent_runs[0];
        return h(
          "tr",
          { dataset: { dag: d.dag_id } },
          h("td", { className: "narrow" }, pauseToggle(d, ctx)),
          h(
            "td",
            {},
            h("a", { href, className: "dag-link" }, d.dag_id),
            d.description ? h("div", { className: "muted small" }, d.description) : null,
            d.tags.length ? h("div", { className: "tags" }, d.tags.map((t) => h("span", { className: "tag" }, t))) : null,
          ),
          h("td", {}, h("code", {}, d.schedule || "manual")),
          h(
            "td",
            { className: "runs" },
            runs.length
              ? runs.map((r) => h("a", { href: runHref(d.dag_id, r.run_id) }, dot(r.state, `${r.run_id}: ${r.state}`)))
              : h("span", { className: "muted small" }, "no runs yet"),
          ),
          h("td", {}, latest ? when(latest.start_date ?? latest.queued_at) : "–"),
          h("td", {}, d.paused ? h("span", { className: "muted" }, "paused") : d.next_run ? nextRun(d.next_run) : h("span", { className: "muted" }, "on trigger")),
          h("td", { className: "narrow right" }, triggerButton(d.dag_id, ctx)),
        );
      }),
    ),
  );
}

// The next scheduled run's logical date; one already past is due now (the scheduler
// creates it on its next pass), which "8 h ago" would not say.
function nextRun(iso) {
  if (Date.parse(iso) > Date.now()) return when(iso);
  return h("span", { title: new Date(iso).toLocaleString() }, "due now");
}
