// The run timeline (a Gantt): per task instance, each try's queued, running and deferred
// segments, the trigger runs it waited on and the batches of events handed to it; the
// run's trace id beside it, to find the same run in a tracing backend.

import { duration, h } from "./dom.js";

const KINDS = { queued: "queued", running: "running", deferred: "deferred" };

export function timeline(data) {
  const t0 = Date.parse(data.start_date ?? data.now);
  const ends = data.tasks.flatMap((t) => t.tries.flatMap((tr) => tr.segments.map((s) => Date.parse(s.end))));
  const starts = data.tasks.flatMap((t) => t.tries.flatMap((tr) => tr.segments.map((s) => Date.parse(s.start))));
  const begin = Math.min(t0, ...starts);
  const end = Math.max(data.end_date ? Date.parse(data.end_date) : Date.parse(data.now), ...ends, begin + 1);
  const span = end - begin;
  const x = (iso) => (100 * (Date.parse(iso) - begin)) / span;
  const bar = (cls, from, to, title, extra = {}) =>
    h("span", {
      className: `gantt-bar ${cls}`,
      title,
      style: `left:${x(from).toFixed(3)}%;width:${Math.max(0.3, x(to) - x(from)).toFixed(3)}%`,
      ...extra,
    });
  const secs = (a, b) => duration((Date.parse(b) - Date.parse(a)) / 1000);
  return h(
    "div",
    { className: "card gantt-card", id: "timeline" },
    h(
      "div",
      { className: "gantt-head" },
      h("h2", {}, "Timeline"),
      h(
        "span",
        { className: "trace", title: data.tracing ? "Exported to your OpenTelemetry backend: search for this trace id" : "Tracing is off on this api-server (set OTEL_TRACES_EXPORTER=otlp); the id is the one the run's spans would have" },
        "trace ",
        h("code", { id: "trace-id" }, data.trace_id),
      ),
    ),
    h(
      "div",
      { className: "gantt-legend legend" },
      ["queued", "running", "deferred"].map((k) => h("span", {}, h("span", { className: `gantt-key seg-${k}` }), k)),
      h("span", {}, h("span", { className: "gantt-key trigger-run" }), "trigger run"),
      h("span", {}, h("span", { className: "gantt-key event-batch" }), "event batch"),
      h("span", { className: "muted" }, `0 – ${duration(span / 1000)}`),
    ),
    data.tasks.length === 0
      ? h("p", { className: "muted" }, "Nothing has been queued yet.")
      : h(
          "div",
          { className: "gantt", id: "gantt" },
          data.tasks.map((t) => {
            const name = t.map_index >= 0 ? `${t.task_id}[${t.map_index}]` : t.task_id;
            return h(
              "div",
              { className: "gantt-row", dataset: { task: t.task_id, mapIndex: String(t.map_index) } },
              h("div", { className: "gantt-name", title: name }, name),
              h(
                "div",
                { className: "gantt-track" },
                t.tries.flatMap((tr) =>
                  tr.segments.map((s) =>
                    bar(`seg-${KINDS[s.kind] ?? "queued"}${s.open ? " open" : ""}`, s.start, s.end, `try ${tr.try_number}: ${s.kind} ${secs(s.start, s.end)}${s.open ? " so far" : ""}`, { dataset: { kind: s.kind, try: String(tr.try_number) } }),
                  ),
                ),
                t.trigger_runs.map((r) => (r.start && r.end ? bar("trigger-run", r.start, r.end, `trigger run ${r.trigger_run_id}: ${secs(r.start, r.end)}`) : null)),
                t.event_batches.map((b) =>
                  bar("event-batch", b.arrived_at ?? b.handed_at, b.handed_at, `events #${b.first}–#${b.last} (${b.count}), handed on after ${secs(b.arrived_at ?? b.handed_at, b.handed_at)}`),
                ),
              ),
            );
          }),
        ),
  );
}
