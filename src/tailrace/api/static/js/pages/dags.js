// The DAG list: each DAG's recent runs as coloured dots, its next run, the paused switch and
// a trigger button for admins; files that failed to import on top; a search box and tag
// filter (kept in the address, so a filtered list can be bookmarked).

import { api, live } from "../api.js";
import { dot, empty, h, replace, when } from "../dom.js";
import { dagHref, runHref } from "../links.js";
import { pauseToggle, triggerButton } from "./trigger.js";

export async function render(root, _params, query, ctx) {
  document.title = "DAGs · Tailrace";
  const errors = h("div");
  const table = h("div", { className: "card" }, h("p", { className: "muted pad" }, "Loading …"));
  const filter = { text: query.get("q") ?? "", tags: new Set(query.getAll("tag")) };
  const tagBar = h("div", { className: "tag-filter", id: "tag-filter" });
  const search = h("input", {
    type: "search",
    id: "dag-search",
    placeholder: "Search DAGs by id or description",
    value: filter.text,
    oninput: () => {
      filter.text = search.value;
      refilter();
    },
  });
  let dags = null;
  // A filter change is kept in the address; a live snapshot only redraws.
  const refilter = () => {
    remember(filter);
    draw();
  };
  const draw = () => {
    if (!dags) return;
    const allTags = [...new Set(dags.flatMap((d) => d.tags))].sort();
    replace(
      tagBar,
      allTags.length ? h("span", { className: "muted small" }, "Tags:") : null,
      allTags.map((t) =>
        h("button", {
          className: filter.tags.has(t) ? "tag-chip on" : "tag-chip",
          dataset: { tag: t },
          onclick: () => {
            if (!filter.tags.delete(t)) filter.tags.add(t);
            refilter();
          },
        }, t),
      ),
      filter.tags.size ? h("button", { className: "ghost small", id: "clear-tags", onclick: () => { filter.tags.clear(); refilter(); } }, "any tag") : null,
    );
    const shown = dags.filter((d) => matches(d, filter));
    replace(table, shown.length || !dags.length ? dagTable(shown, ctx) : empty("No DAG matches", "Nothing has this text in its id or description", filter.tags.size ? " and one of the chosen tags" : "", "."));
  };
  root.append(h("div", { className: "page-head" }, h("h1", {}, "DAGs"), h("div", { className: "toolbar search-bar" }, search)), tagBar, errors, table);

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

  ctx.onLeave(
    live("/ui/dags/events?limit=1000", (page) => {
      dags = page.items;
      draw();
    }),
  );
}

// A DAG matches when its id or description holds the text and it has one of the chosen tags.
function matches(dag, { text, tags }) {
  const needle = text.trim().toLowerCase();
  const found = !needle || dag.dag_id.toLowerCase().includes(needle) || (dag.description ?? "").toLowerCase().includes(needle);
  return found && (!tags.size || dag.tags.some((t) => tags.has(t)));
}

// Only the list's own address is rewritten: a snapshot drawn after a click has set another
// page's hash (its hashchange not yet handled) must not send the browser back to the list.
function remember({ text, tags }) {
  if (!/^#?\/?(\?|$)/.test(location.hash)) return;
  const query = new URLSearchParams();
  if (text) query.set("q", text);
  for (const t of tags) query.append("tag", t);
  const hash = query.size ? `#/?${query}` : "#/";
  if (location.hash !== hash && !(hash === "#/" && !location.hash)) history.replaceState(null, "", hash);
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
