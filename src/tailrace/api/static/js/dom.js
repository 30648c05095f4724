// Building elements, and the small formatting helpers every page shares.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElementNS(
    tag === "svg" || attrs.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml",
    tag,
  );
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false || key === "svg") continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    // Through CSSOM: the Content-Security-Policy refuses style attributes.
    else if (key === "style") el.style.cssText = value;
    else el.setAttribute(key === "className" ? "class" : key, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

export function s(tag, attrs = {}, ...children) {
  return h(tag, { ...attrs, svg: true }, ...children);
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const STATES = [
  "success", "running", "deferred", "queued", "scheduled", "up_for_retry",
  "failed", "upstream_failed", "skipped", "removed", "none",
];
const LABELS = { none: "no status", up_for_retry: "up for retry", upstream_failed: "upstream failed" };
export const stateLabel = (state) => LABELS[state ?? "none"] ?? state;

export function badge(state) {
  const st = state ?? "none";
  return h("span", { className: `badge st-${st}` }, stateLabel(st));
}

export function dot(state, title) {
  return h("span", { className: `dot st-${state ?? "none"}`, title: title ?? stateLabel(state) });
}

// A segmented bar of instance counts per state, with a legend such as "812 success · 40 running".
export function countsBar(counts, { legend = true } = {}) {
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  const ordered = STATES.filter((st) => counts[st]);
  const bar = h(
    "div",
    { className: "countsbar", title: ordered.map((st) => `${counts[st]} ${stateLabel(st)}`).join(" · ") },
    ordered.map((st) => h("span", { className: `st-${st}`, style: `flex-grow:${counts[st]}` })),
  );
  if (!legend) return bar;
  return h(
    "div",
    { className: "counts" },
    bar,
    h(
      "div",
      { className: "legend" },
      ordered.map((st) => h("span", {}, h("span", { className: `dot st-${st}` }), `${num(counts[st])} ${stateLabel(st)}`)),
      total === 0 ? h("span", { className: "muted" }, "no instances yet") : null,
    ),
  );
}

export const num = (n) => (n ?? 0).toLocaleString("en-US");

export function ago(iso) {
  if (!iso) return "–";
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  const future = seconds < 0;
  const a = Math.abs(seconds);
  const text =
    a < 5 ? "just now"
    : a < 60 ? `${Math.round(a)} s`
    : a < 3600 ? `${Math.round(a / 60)} min`
    : a < 86400 ? `${Math.round(a / 3600)} h`
    : `${Math.round(a / 86400)} d`;
  if (text === "just now") return text;
  return future ? `in ${text}` : `${text} ago`;
}

export function when(iso) {
  return h("time", { datetime: iso ?? "", title: iso ? new Date(iso).toLocaleString() : "" }, ago(iso));
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const m = Math.floor(seconds / 60);
  return m < 60 ? `${m} min ${Math.round(seconds % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function runDuration(run) {
  if (!run.start_date) return null;
  const end = run.end_date ? Date.parse(run.end_date) : Date.now();
  return (end - Date.parse(run.start_date)) / 1000;
}

export function empty(title, ...what) {
  return h("div", { className: "empty" }, h("strong", {}, title), h("p", {}, ...what));
}

export function errorBox(error) {
  const detail = Array.isArray(error.detail)
    ? h("ul", {}, error.detail.map((d) => h("li", {}, `${(d.loc ?? []).join(".")}: ${d.msg}`)))
    : null;
  return h("div", { className: "error", role: "alert" }, error.message ?? String(error), detail);
}

export const json = (value) => JSON.stringify(value, null, 2);
