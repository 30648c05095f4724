// The stream view of a run: for each task fed by a trigger, events produced, acknowledged
// and pending, the live rate, backpressure, the latest items; and the `.iterate()` tasks
// whose mapped instances grow as those items arrive.

import { api, live, p } from "../api.js";
import { badge, countsBar, empty, h, num, replace, s } from "../dom.js";
import { dagHref, runHref, taskHref } from "../links.js";

const CONSUMERS = {
  direct: "events go straight into the task's output stream — no worker",
  batch: "a worker handles events in batches (handle_trigger_events)",
  classic: "a worker resumes the task once per event",
};
const SAMPLES = 30;

export async function render(root, { dagId, runId }, _query, ctx) {
  document.title = `Streams · ${runId} · Tailrace`;
  const structure = await api(p`/ui/dags/${dagId}/structure`).catch(() => null);
  const view = h("div");
  root.append(view);
  const rates = new Map(); // task instance id -> { last: [t, produced], samples: [events/s] }
  let snapshot = null;

  const sample = () => {
    if (!snapshot) return;
    const now = performance.now() / 1000;
    for (const st of snapshot.streams) {
      const r = rates.get(st.task_instance_id) ?? { last: [now, st.produced], samples: [] };
      const [then, before] = r.last;
      if (now > then) r.samples.push(Math.max(0, (st.produced - before) / (now - then)));
      r.samples = r.samples.slice(-SAMPLES);
      r.last = [now, st.produced];
      rates.set(st.task_instance_id, r);
    }
    replace(view, page(snapshot, dagId, runId, structure, rates));
  };
  ctx.onLeave(live(p`/ui/dags/${dagId}/runs/${runId}/events`, (next) => {
    const first = snapshot === null;
    snapshot = next;
    if (first) sample();
    else replace(view, page(snapshot, dagId, runId, structure, rates));
  }));
  const timer = setInterval(sample, 1000);
  ctx.onLeave(() => clearInterval(timer));
}

function page({ run, tasks, streams }, dagId, runId, structure, rates) {
  const iterating = (structure?.tasks ?? []).filter((t) => t.mapped === "iterate");
  const byTask = Object.fromEntries(tasks.map((t) => [t.task_id, t]));
  return [
    h(
      "div",
      { className: "page-head" },
      h(
        "div",
        {},
        h("div", { className: "crumbs" }, h("a", { href: "#/" }, "DAGs"), " / ", h("a", { href: dagHref(dagId) }, dagId), " / ", h("a", { href: runHref(dagId, runId) }, runId), " / "),
        h("h1", {}, "Stream view ", badge(run.state)),
      ),
    ),
    h(
      "p",
      { className: "muted intro" },
      "A trigger in the triggerer produces events; each is stored, then handed to its consumer in order. ",
      "Pending events wait for the consumer; past the task's limit the trigger is paused (backpressure) until they are acknowledged.",
    ),
    streams.length
      ? streams.map((st) => streamCard(st, rates.get(st.task_instance_id)?.samples ?? [], dagId, runId))
      : empty("No streams in this run yet", "A task that waits on a trigger shows up here once it has deferred."),
    iterating.length
      ? h(
          "div",
          { className: "card", id: "iterate-tasks" },
          h("h2", {}, "Mapped as items arrive (.iterate())"),
          iterating.map((t) => {
            const summary = byTask[t.task_id] ?? { counts: {}, total: 0 };
            return h(
              "div",
              { className: "iterate-row", dataset: { task: t.task_id } },
              h(
                "div",
                { className: "iterate-name" },
                h("a", { href: taskHref(dagId, runId, t.task_id) }, t.task_id),
                h("span", { className: "muted small" }, ` over ${t.iterate_sources.join(", ")}`),
              ),
              h("div", { className: "iterate-total" }, h("strong", { className: "instances" }, num(summary.total)), " instances"),
              countsBar(summary.counts),
            );
          }),
        )
      : null,
  ];
}

function status(st) {
  if (st.paused_by_backpressure) return h("span", { className: "pill warn", id: `paused-${st.task_id}` }, "⏸ paused by backpressure");
  if (st.trigger_done || st.closed) return h("span", { className: "pill done" }, "✓ complete");
  if (st.task_state === "deferred" || st.task_state === "running") return h("span", { className: "pill live" }, h("span", { className: "pulse" }), "streaming");
  return badge(st.task_state);
}

function metric(label, value, id, hint) {
  return h("div", { className: "metric", title: hint }, h("div", { className: "value", id }, value), h("div", { className: "label" }, label));
}

function streamCard(st, samples, dagId, runId) {
  const rate = samples.length ? samples[samples.length - 1] : 0;
  const done = st.trigger_done || st.closed;
  const acked = st.produced ? (st.acknowledged / st.produced) * 100 : 0;
  const figures = h(
    "div",
    {},
    h(
      "div",
      { className: "metrics" },
      metric("events produced", num(st.produced), `produced-${st.task_id}`, "Events the trigger yielded, each stored before delivery"),
      metric("acknowledged", num(st.acknowledged), `acked-${st.task_id}`, "Events the consumer has handled"),
      metric("pending", num(st.pending), `pending-${st.task_id}`, "Stored, not yet handled"),
      metric("items in output", num(st.items), `items-${st.task_id}`, "Items in the task's output stream"),
      st.dead_letters
        ? metric("dead letters", num(st.dead_letters), `dead-${st.task_id}`, "Events of batches that failed every try: acknowledged, kept with the error")
        : null,
      done
        ? metric("events/s on average", st.events_per_second ?? "–", `rate-${st.task_id}`, "Over the trigger's whole run")
        : metric("events/s now", rate.toFixed(1), `rate-${st.task_id}`, st.events_per_second ? `average ${st.events_per_second}/s` : ""),
    ),
    h("div", { className: "progress", title: `${acked.toFixed(0)} % acknowledged` }, h("span", { style: `width:${acked}%` })),
    sparkline(samples),
  );
  const items = h(
    "div",
    { className: "items" },
    h("h3", {}, "Latest items"),
    st.latest_items.length
      ? h(
          "ol",
          { className: "item-list" },
          st.latest_items
            .slice()
            .reverse()
            .map((i) => h("li", {}, h("span", { className: "index" }, `#${i.index}`), h("code", { title: JSON.stringify(i.value) }, short(i.value)))),
        )
      : h("p", { className: "muted small" }, "No items yet."),
  );
  const letters = st.latest_dead_letters.length
    ? h(
        "div",
        { className: "dead-letters", id: `dead-letters-${st.task_id}` },
        h("h3", {}, "Latest dead letters"),
        h(
          "ol",
          { className: "item-list" },
          st.latest_dead_letters.map((d) =>
            h(
              "li",
              {},
              h("span", { className: "index" }, `#${d.sequence_index}`),
              // The message's id at its broker where it has one, else what it carried.
              d.dedup_key
                ? h("code", { title: `message id; payload ${JSON.stringify(d.payload)}` }, d.dedup_key)
                : h("code", { title: JSON.stringify(d.payload) }, short(d.payload)),
              h("span", { className: "muted small" }, ` try ${d.try_number}: `),
              h("span", { className: "reason", title: d.reason }, lastLine(d.reason)),
            ),
          ),
        ),
        h("p", { className: "muted small" }, "All of them: ", h("code", {}, "tailrace streams dead-letters"), " or ", h("code", {}, "GET /api/v1/streams/dead-letters"), "."),
      )
    : null;
  return h(
    "section",
    { className: "card stream", dataset: { stream: st.task_id } },
    h(
      "div",
      { className: "panel-head" },
      h(
        "h2",
        {},
        h("a", { href: taskHref(dagId, runId, st.task_id, st.map_index >= 0 ? st.map_index : null) }, st.task_id),
        st.map_index >= 0 ? ` [${st.map_index}]` : "",
        h("span", { className: "consumer" }, CONSUMERS[st.consumer] ?? st.consumer),
      ),
      status(st),
    ),
    h("div", { className: "stream-body" }, figures, items),
    letters,
  );
}

// A traceback's last line: the exception and its message.
function lastLine(text) {
  const lines = text.trim().split("\n").filter((l) => l.trim());
  const line = (lines[lines.length - 1] ?? text).trim();
  return line.length > 160 ? `${line.slice(0, 159)}…` : line;
}

function short(value) {
  const text = JSON.stringify(value);
  return text.length > 160 ? `${text.slice(0, 159)}…` : text;
}

function sparkline(samples) {
  const w = 240;
  const hgt = 40;
  const max = Math.max(1, ...samples);
  const step = w / (SAMPLES - 1);
  const offset = (SAMPLES - samples.length) * step;
  const points = samples.map((v, i) => `${(offset + i * step).toFixed(1)},${(hgt - 2 - (v / max) * (hgt - 4)).toFixed(1)}`).join(" ");
  return h(
    "div",
    { className: "spark" },
    s("svg", { viewBox: `0 0 ${w} ${hgt}`, width: w, height: hgt, preserveAspectRatio: "none" }, samples.length > 1 ? s("polyline", { points }) : null),
    h("span", { className: "muted small" }, `events/s, last ${SAMPLES} s (peak ${max.toFixed(0)})`),
  );
}
