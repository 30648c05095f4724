// One DAG: a grid of its runs by tasks (a mapped task is one cell, its instances counted
// per state), the selected run's details, and the graph coloured by that run.

import { api, live, p } from "../api.js";
import { graph, taskTable } from "../components.js";
import { badge, countsBar, duration, empty, h, json, replace, runDuration, when } from "../dom.js";
import { dagHref, runHref, streamsHref, taskHref } from "../links.js";
import { waitingPanel } from "./assets.js";
import { pauseToggle, triggerButton } from "./trigger.js";

export async function render(root, { dagId, tab = "grid" }, query, ctx) {
  document.title = `${dagId} · Tailrace`;
  const [dag, structure] = await Promise.all([api(p`/dags/${dagId}`), api(p`/ui/dags/${dagId}/structure`)]);
  const head = h("div");
  const body = h("div", { className: tab === "graph" ? "graph-page" : "grid-page" });
  let selected = query.get("run");
  const cursor = query.get("cursor");
  let latest = null;
  const collapsed = new Set(); // task groups folded in the grid

  const drawHead = (d) =>
    replace(
      head,
      h(
        "div",
        { className: "page-head" },
        h("div", {}, h("div", { className: "crumbs" }, h("a", { href: "#/" }, "DAGs"), " / "), h("h1", {}, d.dag_id)),
        h("div", { className: "head-actions" }, pauseToggle(d, ctx, drawHead), triggerButton(d.dag_id, ctx)),
      ),
      h(
        "p",
        { className: "muted" },
        d.description ? `${d.description} · ` : "",
        "schedule ",
        h("code", {}, d.schedule || "manual"),
        d.next_run && !d.paused ? [" · next run ", when(d.next_run)] : "",
        " · ",
        h("code", { className: "small" }, d.fileloc),
      ),
      h(
        "nav",
        { className: "tabs" },
        h("a", { href: dagHref(d.dag_id, "grid"), className: tab === "grid" ? "active" : "" }, "Grid"),
        h("a", { href: dagHref(d.dag_id, "graph"), className: tab === "graph" ? "active" : "" }, "Graph"),
      ),
    );
  drawHead(dag);
  // An asset-scheduled DAG: what its next run still waits for.
  const waiting = h("div");
  root.append(head, waiting, body);
  waitingPanel(dagId).then((panel) => panel && replace(waiting, panel));

  const draw = () => {
    const runs = latest.items;
    if (!runs.length) {
      replace(body, empty("No runs yet", ctx.isAdmin ? "Press ▶ Trigger above to start one, or run " : "An admin can trigger one, or run ", h("code", {}, `tailrace dags trigger ${dagId}`), "."), tab === "graph" ? graph(structure, null, dagId, null) : null);
      return;
    }
    const run = runs.find((r) => r.run_id === selected) ?? runs[0];
    const pick = (runId) => {
      selected = runId;
      draw();
    };
    const toggle = (groupId) => {
      if (!collapsed.delete(groupId)) collapsed.add(groupId);
      draw();
    };
    if (tab === "graph") {
      replace(
        body,
        h("div", { className: "toolbar" }, "Colours from run ", runSelect(runs, run, pick), " ", badge(run.state), " ", h("a", { href: runHref(dagId, run.run_id) }, "open run →")),
        h("div", { className: "card graph-card" }, graph(structure, run.tasks, dagId, run.run_id)),
        legend(),
      );
    } else {
      const card = h("div", { className: "card grid-card" }, gridTable(dagId, latest, structure, run, pick, collapsed, toggle), pager(dagId, cursor, latest.next_cursor));
      const scrolled = body.querySelector(".grid-card")?.scrollLeft;
      replace(body, card, runPanel(dagId, run, structure));
      // The newest runs are on the right: show them first, then keep where the user scrolled.
      card.scrollLeft = scrolled ?? card.scrollWidth;
    }
  };
  ctx.onLeave(
    live(p`/ui/dags/${dagId}/grid/events` + `?limit=25${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, (grid) => {
      latest = grid;
      draw();
    }),
  );
}

// The grid shows 25 runs; older ones a page at a time.
function pager(dagId, cursor, next) {
  if (!cursor && !next) return null;
  return h(
    "div",
    { className: "pager" },
    cursor ? h("a", { href: dagHref(dagId, "grid") }, "← newest runs") : h("span"),
    next ? h("a", { href: `${dagHref(dagId, "grid")}?cursor=${encodeURIComponent(next)}` }, "older runs →") : h("span"),
  );
}

function runSelect(runs, run, pick) {
  return h(
    "select",
    { id: "run-select", onchange: (e) => pick(e.target.value) },
    runs.map((r) => h("option", { value: r.run_id, selected: r.run_id === run.run_id }, `${r.run_id} (${r.state}, ${runType(r)})`)),
  );
}

// "scheduled", "manual", "asset_triggered", or "backfill 3" (the backfill's id).
function runType(r) {
  return r.backfill_id ? `${r.run_type} ${r.backfill_id}` : r.run_type;
}

function legend() {
  const states = ["success", "running", "deferred", "queued", "scheduled", "up_for_retry", "failed", "upstream_failed", "skipped", "none"];
  return h("div", { className: "legend states-legend" }, states.map((st) => h("span", {}, badge(st))));
}

function gridTable(dagId, grid, structure, selectedRun, pick, collapsed, toggle) {
  const runs = [...grid.items].reverse(); // oldest on the left, as time flows
  // Each run's bar is as tall as its duration against the longest shown (as in Airflow).
  const longest = Math.max(0.001, ...runs.map((r) => runDuration(r) ?? 0));
  const info = Object.fromEntries(structure.tasks.map((t) => [t.task_id, t]));
  return h(
    "table",
    { className: "grid", id: "grid" },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", { className: "task-col" }, "Task \\ Run"),
        runs.map((r, i) => {
          // A time under a column only where it changes (25 identical labels are noise),
          // written upwards so neighbouring labels never overlap; the date where it changes.
          const at = r.logical_date ?? r.queued_at;
          const before = i > 0 ? runs[i - 1].logical_date ?? runs[i - 1].queued_at : null;
          const label = runLabel(at, before);
          return h(
            "th",
            {
              className: r.run_id === selectedRun.run_id ? "run-col selected" : "run-col",
              title: `${r.run_id}\n${r.state} · ${runType(r)}${at ? `\n${new Date(at).toLocaleString()}` : ""}\n${duration(runDuration(r))}\ntrace ${r.trace_id}`,
              dataset: { traceId: r.trace_id },
              onclick: () => pick(r.run_id),
            },
            h(
              "span",
              { className: "runbar-track" },
              h("span", { className: `runbar st-${r.state}`, style: `height:${Math.max(4, Math.round((40 * (runDuration(r) ?? 0)) / longest))}px` }),
            ),
            label ? h("span", { className: "run-date" }, label) : null,
          );
        }),
      ),
    ),
    h(
      "tbody",
      {},
      gridRows(grid.task_ids, structure, collapsed).map((row) => (row.taskId ? taskRow(row, runs, info, dagId, selectedRun) : groupRow(row, runs, selectedRun, toggle, collapsed))),
    ),
  );
}

const URGENCY = ["failed", "upstream_failed", "up_for_retry", "running", "deferred", "queued", "scheduled", "none", "removed", "success", "skipped"];
const ownName = (taskId, group) => (group && taskId.startsWith(`${group}.`) ? taskId.slice(group.length + 1) : taskId);

// The grid's rows: tasks in the DAG's order, each task group as a row of its own (click it
// to fold its tasks away) followed by its tasks and groups, indented.
function gridRows(taskIds, structure, collapsed) {
  const groupOf = Object.fromEntries(structure.tasks.map((t) => [t.task_id, t.task_group]));
  const known = Object.fromEntries((structure.groups ?? []).map((g) => [g.group_id, g]));
  const children = new Map();
  const add = (container, key, item) => {
    if (!children.has(container)) children.set(container, new Map());
    if (!children.get(container).has(key)) children.get(container).set(key, item);
  };
  const members = {};
  for (const taskId of taskIds) {
    let group = known[groupOf[taskId]] ? groupOf[taskId] : null;
    add(group ?? "", `task:${taskId}`, { taskId, group });
    while (group) {
      (members[group] ??= []).push(taskId);
      const parent = known[group].parent ?? "";
      add(parent, `group:${group}`, { group: known[group] });
      group = known[group].parent;
    }
  }
  const rows = [];
  const walk = (container, depth) => {
    for (const item of children.get(container)?.values() ?? []) {
      if (item.taskId) {
        rows.push({ ...item, depth });
      } else {
        rows.push({ group: item.group, members: members[item.group.group_id], depth });
        if (!collapsed.has(item.group.group_id)) walk(item.group.group_id, depth + 1);
      }
    }
  };
  walk("", 0);
  return rows;
}

function groupRow({ group, members, depth }, runs, selectedRun, toggle, collapsed) {
  const folded = collapsed.has(group.group_id);
  return h(
    "tr",
    { className: "group-row", dataset: { group: group.group_id } },
    h(
      "th",
      { className: "task-col", style: `padding-left:${depth * 14}px` },
      h("button", { className: "fold", title: folded ? "Show the group's tasks" : "Fold the group's tasks", onclick: () => toggle(group.group_id) }, folded ? "▸" : "▾", " ", group.label),
    ),
    runs.map((r) => {
      const counts = {};
      for (const taskId of members) for (const [st, n] of Object.entries(r.tasks[taskId]?.counts ?? {})) counts[st] = (counts[st] ?? 0) + n;
      const state = URGENCY.find((st) => counts[st]) ?? "none";
      const title = Object.entries(counts).map(([st, n]) => `${n} ${st}`).join(", ") || "no instance";
      return h("td", { className: r.run_id === selectedRun.run_id ? "selected" : "" }, h("span", { className: `cell group-cell st-${state}`, title: `${group.group_id} · ${r.run_id}\n${title}` }));
    }),
  );
}

function taskRow({ taskId, group, depth }, runs, info, dagId, selectedRun) {
  const kind = info[taskId]?.mapped;
  return h(
    "tr",
    { dataset: { task: taskId } },
    h("th", { className: "task-col", style: depth ? `padding-left:${depth * 14 + 16}px` : "", title: taskId }, ownName(taskId, group), kind ? h("span", { className: `kind kind-${kind}` }, kind === "iterate" ? "iterate" : "mapped") : null),
    runs.map((r) => {
      const t = r.tasks[taskId];
      const mapped = kind || (t && t.total > 1);
      const title = t ? Object.entries(t.counts).map(([st, n]) => `${n} ${st}`).join(", ") : "no instance";
      return h(
        "td",
        { className: r.run_id === selectedRun.run_id ? "selected" : "" },
        h(
          "a",
          { href: taskHref(dagId, r.run_id, taskId), title: `${taskId} · ${r.run_id}\n${title}`, className: `cell ${mapped ? "mapped" : `st-${t?.state ?? "none"}`}` },
          mapped && t ? countsBar(t.counts, { legend: false }) : null,
        ),
      );
    }),
  );
}

const pad = (n) => String(n).padStart(2, "0");
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

// "14:05" under a run, "Dec 1 14:05" where the day changes, nothing where the minute is the
// previous run's.
function runLabel(iso, previousIso) {
  if (!iso) return "";
  const d = new Date(iso);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  const prev = previousIso ? new Date(previousIso) : null;
  if (prev && prev.toDateString() === d.toDateString()) {
    return `${pad(prev.getHours())}:${pad(prev.getMinutes())}` === time ? "" : time;
  }
  return `${MONTHS[d.getMonth()]} ${d.getDate()} ${time}`;
}

function runPanel(dagId, run, structure) {
  const summaries = structure.tasks.map((t) => run.tasks[t.task_id] ?? { task_id: t.task_id, state: null, counts: {}, total: 0 });
  const streaming = structure.tasks.some((t) => t.starts_in_triggerer || t.mapped === "iterate");
  return h(
    "aside",
    { className: "card panel", id: "run-panel" },
    h("div", { className: "panel-head" }, h("h2", {}, h("a", { href: runHref(dagId, run.run_id) }, run.run_id)), badge(run.state)),
    h(
      "dl",
      { className: "facts" },
      h("dt", {}, "Type"), h("dd", {}, run.run_type),
      h("dt", {}, "Started"), h("dd", {}, run.start_date ? when(run.start_date) : "not yet"),
      h("dt", {}, "Duration"), h("dd", {}, duration(runDuration(run))),
      Object.keys(run.conf).length ? [h("dt", {}, "Conf"), h("dd", {}, h("pre", { className: "conf" }, json(run.conf)))] : null,
    ),
    streaming ? h("p", {}, h("a", { className: "button", href: streamsHref(dagId, run.run_id) }, "≋ Stream view")) : null,
    taskTable(dagId, run.run_id, summaries, structure),
  );
}
