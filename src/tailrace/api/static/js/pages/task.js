// A task instance: its details and tries, admin actions, a human-in-the-loop task's
// request (answered here), and three tabs: its log followed live (the worker's lines and,
// while it was deferred, its trigger's), the XComs it pushed, and its templated fields as
// rendered for the chosen try. A mapped task first lists its instances.

import { API, api, live, p } from "../api.js";
import { badge, countsBar, duration, errorBox, h, json, num, replace, when } from "../dom.js";
import { findRequest, requestCard } from "../hitl.js";
import { dagHref, runHref, streamsHref, taskHref } from "../links.js";

export async function render(root, { dagId, runId, taskId }, query, ctx) {
  document.title = `${taskId} · ${runId} · Tailrace`;
  const structure = await api(p`/ui/dags/${dagId}/structure`).catch(() => null);
  const task = structure?.tasks.find((t) => t.task_id === taskId);
  const mapIndex = query.has("map_index") ? Number(query.get("map_index")) : null;
  const crumbs = h(
    "div",
    { className: "crumbs" },
    h("a", { href: "#/" }, "DAGs"), " / ", h("a", { href: dagHref(dagId) }, dagId), " / ",
    h("a", { href: runHref(dagId, runId) }, runId), " / ",
    mapIndex !== null && task?.mapped ? [h("a", { href: taskHref(dagId, runId, taskId) }, taskId), " / "] : null,
  );
  root.append(crumbs);
  if (task?.mapped && mapIndex === null) {
    await instances(root, dagId, runId, task, ctx);
  } else {
    await instance(root, dagId, runId, task, taskId, mapIndex ?? -1, query, ctx);
  }
}

async function instances(root, dagId, runId, task, ctx) {
  const summary = h("div");
  const list = h("div", { className: "card" });
  const filter = h(
    "select",
    { id: "state-filter", onchange: () => load(true) },
    h("option", { value: "" }, "every state"),
    ["success", "running", "deferred", "queued", "scheduled", "up_for_retry", "failed", "upstream_failed", "skipped", "none"].map((st) => h("option", { value: st }, st)),
  );
  root.append(
    h("div", { className: "page-head" }, h("h1", {}, task.task_id, h("span", { className: `kind kind-${task.mapped}` }, task.mapped === "iterate" ? "iterate" : "mapped"))),
    summary,
    h("div", { className: "toolbar" }, "Show ", filter),
    list,
  );
  let cursor = null;
  let rows = [];
  async function load(fresh) {
    if (fresh) {
      cursor = null;
      rows = [];
    }
    const params = new URLSearchParams({ task_id: task.task_id, limit: "100" });
    if (filter.value) params.set("state", filter.value);
    if (cursor) params.set("cursor", cursor);
    const page = await api(p`/dags/${dagId}/runs/${runId}/task-instances` + `?${params}`);
    rows = rows.concat(page.items);
    cursor = page.next_cursor;
    replace(
      list,
      rows.length
        ? h(
            "table",
            { className: "table", id: "instances" },
            h("thead", {}, h("tr", {}, ["Map index", "Item", "State", "Try", "Started", "Duration"].map((c) => h("th", {}, c)))),
            h(
              "tbody",
              {},
              rows.map((ti) =>
                h(
                  "tr",
                  {},
                  h("td", {}, h("a", { href: taskHref(dagId, runId, ti.task_id, ti.map_index) }, ti.map_index)),
                  h("td", {}, ti.rendered_map_index ?? ""),
                  h("td", {}, badge(ti.state)),
                  h("td", {}, ti.try_number),
                  h("td", {}, ti.start_date ? when(ti.start_date) : "–"),
                  h("td", {}, duration(ti.duration)),
                ),
              ),
            ),
          )
        : h("p", { className: "muted pad" }, "No instances here yet."),
      cursor ? h("button", { className: "ghost", onclick: () => load(false) }, "Show more") : null,
    );
  }
  await load(true);
  ctx.onLeave(
    live(p`/ui/dags/${dagId}/runs/${runId}/events`, (snapshot) => {
      const t = snapshot.tasks.find((x) => x.task_id === task.task_id);
      replace(summary, h("div", { className: "card" }, h("h2", {}, `${num(t?.total ?? 0)} instances`), countsBar(t?.counts ?? {})));
    }),
  );
}

async function instance(root, dagId, runId, task, taskId, mapIndex, query, ctx) {
  const base = p`/dags/${dagId}/runs/${runId}/task-instances/${taskId}`;
  const details = h("div");
  const hitlBox = h("div", { id: "hitl" });
  const message = h("div");
  const logBox = h("pre", { className: "log", id: "log" });
  const logState = h("span", { className: "muted small", id: "log-state" });
  const tries = h("div", { className: "tries" });
  const xcomBox = h("div", { className: "xcom-box", id: "xcom" });
  const renderedBox = h("div", { className: "xcom-box", id: "rendered" });
  let tab = ["xcom", "rendered"].includes(query.get("tab")) ? query.get("tab") : "log";
  const tabs = h("nav", { className: "tabs card-tabs" });
  const logPane = h("div", {}, h("div", { className: "panel-head" }, tries, logState), logBox);
  const drawTabs = () => {
    replace(
      tabs,
      [["log", "Log"], ["xcom", "XCom"], ["rendered", "Rendered Template"]].map(([name, label]) =>
        h("a", { href: "#", id: `tab-${name}`, className: tab === name ? "active" : "", onclick: (e) => { e.preventDefault(); tab = name; drawTabs(); } }, label),
      ),
    );
    logPane.hidden = tab !== "log";
    xcomBox.hidden = tab !== "xcom";
    renderedBox.hidden = tab !== "rendered";
    if (tab === "xcom") loadXcom();
    if (tab === "rendered") loadRendered();
  };
  async function loadRendered() {
    if (!shownTry) {
      replace(renderedBox, h("p", { className: "muted pad" }, "The task has not started: its templates are rendered when a try runs."));
      return;
    }
    try {
      const rendered = await api(p`/ui/dags/${dagId}/runs/${runId}/tasks/${taskId}/rendered` + `?map_index=${mapIndex}&try_number=${shownTry}`);
      replace(renderedBox, renderedTable(rendered, ti?.tries ?? [], (number) => showTry(number, true)));
    } catch (error) {
      replace(renderedBox, errorBox(error));
    }
  }
  async function loadXcom() {
    try {
      const entries = await api(p`/ui/dags/${dagId}/runs/${runId}/tasks/${taskId}/xcom` + `?map_index=${mapIndex}`);
      replace(xcomBox, xcomTable(entries));
    } catch (error) {
      replace(xcomBox, errorBox(error));
    }
  }
  root.append(details, hitlBox, message, h("div", { className: "card log-card" }, tabs, logPane, xcomBox, renderedBox));

  let ti = null;
  let shownTry = query.has("try") ? Number(query.get("try")) : null;
  let follow = null;
  let loadedTry = null;
  drawTabs();

  const act = async (label, request) => {
    if (!confirm(`${label}? This applies to every map index of ${taskId} in this run.`)) return;
    try {
      const result = await request();
      replace(message, h("div", { className: "notice" }, `${label}: ${num(result.cleared ?? result.marked)} task instances.`));
    } catch (error) {
      replace(message, errorBox(error));
    }
  };

  function drawDetails() {
    const rows = [
      ["State", badge(ti.state)],
      ["Try", `${ti.try_number} of ${ti.max_tries + 1}`],
      ["Operator", h("code", { title: ti.operator }, task?.operator_name ?? ti.operator)],
      ["Queued", when(ti.queued_at)],
      ["Started", ti.start_date ? when(ti.start_date) : "not yet"],
      ["Ended", ti.end_date ? when(ti.end_date) : "–"],
      ["Duration", duration(ti.duration)],
      ["Host", ti.hostname ?? "–"],
      ti.trigger_id ? ["Trigger", `#${ti.trigger_id}`] : null,
      ti.next_retry_at ? ["Next retry", when(ti.next_retry_at)] : null,
    ].filter(Boolean);
    replace(
      details,
      h(
        "div",
        { className: "page-head" },
        h("h1", {}, taskId, mapIndex >= 0 ? ` [${mapIndex}]` : "", " ", badge(ti.state)),
        h(
          "div",
          { className: "head-actions" },
          ti.trigger_id ? h("a", { className: "button", href: streamsHref(dagId, runId) }, "≋ Stream view") : null,
          ctx.isAdmin
            ? [
                h("button", { className: "ghost", id: "clear-task", onclick: () => act("Clear", () => api(`${base}/clear`, { method: "POST" })) }, "Clear"),
                h("button", { className: "ghost ok", id: "mark-success", onclick: () => act("Mark success", () => api(base, { method: "PATCH", body: { state: "success" } })) }, "Mark success"),
                h("button", { className: "ghost bad", id: "mark-failed", onclick: () => act("Mark failed", () => api(base, { method: "PATCH", body: { state: "failed" } })) }, "Mark failed"),
              ]
            : null,
        ),
      ),
      ti.rendered_map_index ? h("p", { className: "muted" }, ti.rendered_map_index) : null,
      h("div", { className: "card" }, h("dl", { className: "facts wide" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]))),
      ti.error ? h("div", { className: "card" }, h("h2", {}, "Error"), h("pre", { className: "error-text" }, ti.error)) : null,
    );
    replace(
      tries,
      ti.tries.map((t) =>
        h("button", { className: t.try_number === shownTry ? "try active" : "try", title: t.state ?? "", onclick: () => showTry(t.try_number, true) }, h("span", { className: `dot st-${t.state ?? "none"}` }), `Try ${t.try_number}`),
      ),
    );
  }

  function showTry(number, chosen) {
    shownTry = number;
    if (chosen) drawDetails();
    if (tab === "rendered") loadRendered();
    if (follow) follow.close();
    follow = null;
    loadedTry = number;
    replace(logBox);
    if (!number) {
      replace(logState, "the task has not started; its log appears here when it does");
      return;
    }
    replace(logState, "following …");
    const source = new EventSource(`${API}${base}/logs/${number}/events?map_index=${mapIndex}`);
    follow = source;
    let partial = "";
    const write = (text, flush) => {
      const atBottom = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 8;
      const lines = (partial + text).split("\n");
      partial = flush ? "" : lines.pop();
      for (const line of lines) {
        // The trigger's lines, written while the task waited in the triggerer.
        logBox.append(h("span", { className: line.includes("{triggerer") ? "line triggerer" : "line" }, line), "\n");
      }
      if (atBottom) logBox.scrollTop = logBox.scrollHeight;
    };
    source.addEventListener("log", (e) => write(JSON.parse(e.data), false));
    source.addEventListener("end", () => {
      write("", true);
      source.close();
      replace(logState, "complete");
    });
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        loadedTry = null; // no log yet: try again when the instance changes
        replace(logState, "no log yet");
      }
    };
  }
  ctx.onLeave(() => follow?.close());

  // A human-in-the-loop task's request: drawn again only when it changes (never under the
  // hands of someone filling in its form).
  let shownRequest = null;
  async function drawRequest() {
    const request = await findRequest(dagId, runId, taskId, mapIndex);
    if (JSON.stringify(request) === shownRequest) return;
    shownRequest = JSON.stringify(request);
    const onAnswered = (now) => {
      shownRequest = JSON.stringify(now);
    };
    replace(hitlBox, request ? requestCard(request, ctx, { onAnswered }) : null);
  }

  async function refresh() {
    drawRequest().catch((error) => replace(hitlBox, errorBox(error)));
    ti = await api(`${base}?map_index=${mapIndex}`);
    const latestTry = ti.try_number;
    if (shownTry === null || (!query.has("try") && shownTry < latestTry)) shownTry = latestTry;
    drawDetails();
    if (loadedTry !== shownTry) showTry(shownTry, false);
    else if (tab === "rendered") loadRendered();
    if (tab === "xcom") loadXcom();
  }
  try {
    await refresh();
  } catch (error) {
    replace(details, errorBox(error));
    return;
  }
  let last = null;
  ctx.onLeave(
    live(p`/ui/dags/${dagId}/runs/${runId}/events`, (snapshot) => {
      const t = JSON.stringify(snapshot.tasks.find((x) => x.task_id === taskId));
      if (t !== last) {
        last = t;
        refresh().catch(() => {});
      }
    }),
  );
}

function xcomTable(entries) {
  if (!entries.length) return h("p", { className: "muted pad" }, "No XComs: the task has pushed nothing (yet), or it was cleared.");
  return h(
    "table",
    { className: "table", id: "xcom-table" },
    h("thead", {}, h("tr", {}, ["Key", "Value", "Size"].map((c) => h("th", {}, c)))),
    h(
      "tbody",
      {},
      entries.map((x) =>
        h(
          "tr",
          { dataset: { key: x.key } },
          h("td", { className: "nowrap" }, h("code", {}, x.key)),
          h("td", {}, h("pre", { className: "conf xcom-value" }, x.truncated ? `${x.value} …` : json(x.value)), x.truncated ? h("div", { className: "muted small" }, "cut: the first 100,000 characters of its JSON") : null),
          h("td", { className: "nowrap muted small" }, `${num(x.size)} chars`),
        ),
      ),
    ),
  );
}

function renderedTable(rendered, tries, choose) {
  const picker = tries.length > 1
    ? h("div", { className: "tries" }, tries.map((t) => h("button", { className: t.try_number === rendered.try_number ? "try active" : "try", onclick: () => choose(t.try_number) }, h("span", { className: `dot st-${t.state ?? "none"}` }), `Try ${t.try_number}`)))
    : null;
  const head = h("div", { className: "panel-head" }, picker, h("span", { className: "muted small" }, `as rendered for try ${rendered.try_number}`));
  if (!rendered.rendered) return h("div", {}, head, h("p", { className: "muted pad" }, "Not rendered: this try has not run yet, or it failed before its templates were rendered."));
  if (!rendered.fields.length) return h("div", {}, head, h("p", { className: "muted pad" }, "This task has no templated fields."));
  return h(
    "div",
    {},
    head,
    h(
      "table",
      { className: "table", id: "rendered-table" },
      h("thead", {}, h("tr", {}, ["Field", "Rendered value"].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        rendered.fields.map((f) =>
          h("tr", { dataset: { field: f.field } }, h("td", { className: "nowrap" }, h("code", {}, f.field)), h("td", {}, h("pre", { className: "conf xcom-value" }, f.value))),
        ),
      ),
    ),
  );
}
