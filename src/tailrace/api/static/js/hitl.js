// Human in the loop: what a deferred HITL task asks, and the form an admin answers it with
// (its options, one or several, and its params as fields made from their schemas). Once
// answered, the response and who gave it. The API checks the response; its refusals (a
// second answer, an option not offered, a param that fails its schema) are shown as said.

import { api, p } from "./api.js";
import { errorBox, h, json, replace, when } from "./dom.js";
import { taskHref } from "./links.js";

export function hitlPath(dagId, runId, taskId, mapIndex) {
  return p`/hitlDetails/${dagId}/${runId}/${taskId}` + (mapIndex >= 0 ? `/${mapIndex}` : "");
}

// The request of one task instance, or null when it has asked nothing.
export async function findRequest(dagId, runId, taskId, mapIndex) {
  try {
    return await api(hitlPath(dagId, runId, taskId, mapIndex));
  } catch (error) {
    if (error.status === 404) return null;
    throw error;
  }
}

// Requests not answered whose tasks still wait (of one DAG).
export async function pendingRequests(dagId = null) {
  const query = new URLSearchParams({ response_received: "false" });
  if (dagId) query.set("dag_id", dagId);
  return (await api(`/hitlDetails?${query}`)).hitl_details.filter((r) => r.task_instance_state === "deferred");
}

const instanceName = (r) => `${r.task_id}${r.map_index >= 0 ? ` [${r.map_index}]` : ""}`;

// A card for one request: the form while it waits, else its response. After a refusal
// because it was answered meanwhile, the card shows that answer under the refusal.
// ``onAnswered`` is told the request as it is then.
export function requestCard(request, ctx, { link = false, onAnswered = () => {} } = {}) {
  const card = h("div", { className: "card hitl", dataset: { hitl: `${request.dag_id}/${request.dag_run_id}/${instanceName(request)}` } });
  const draw = (r, refusal = null) => {
    const href = taskHref(r.dag_id, r.dag_run_id, r.task_id, r.map_index >= 0 ? r.map_index : null);
    replace(
      card,
      h("div", { className: "hitl-head" }, h("span", { className: "kind kind-hitl" }, "Required action"), h("h2", {}, r.subject)),
      h("p", { className: "muted small hitl-where" }, link ? [h("a", { href }, `${r.dag_id} / ${r.dag_run_id} / ${instanceName(r)}`), " · asked "] : "Asked ", when(r.created_at)),
      r.body ? h("div", { className: "hitl-body" }, r.body) : null,
      refusal,
      r.response_received ? response(r) : waiting(r, ctx, answered),
    );
  };
  const answered = async (refusal) => {
    const now = await findRequest(request.dag_id, request.dag_run_id, request.task_id, request.map_index);
    draw(now, refusal);
    ctx.countWaiting?.();
    onAnswered(now);
  };
  draw(request);
  return card;
}

function response(request) {
  const who = request.responded_by
    ? [h("strong", { className: "hitl-by" }, request.responded_by)]
    : [h("strong", {}, "the timeout"), " (its defaults)"];
  return h(
    "div",
    { className: "hitl-response" },
    h("p", {}, "Answered ", request.chosen_options.map((o) => h("span", { className: "option-chip" }, o)), " by ", who, " ", when(request.responded_at)),
    Object.keys(request.params_input ?? {}).length
      ? h("dl", { className: "facts" }, Object.entries(request.params_input).map(([k, v]) => [h("dt", {}, k), h("dd", {}, h("code", {}, typeof v === "string" ? v : JSON.stringify(v)))]))
      : null,
  );
}

function waiting(request, ctx, answered) {
  if (request.task_instance_state !== "deferred") {
    return h("p", { className: "muted" }, `No longer waiting for a response: the task is ${request.task_instance_state ?? "not scheduled"}.`);
  }
  const fields = Object.entries(request.params ?? {}).map(([name, param]) => paramField(name, param));
  const message = h("div", { className: "hitl-message" });
  const chosen = new Set(request.defaults ?? []);
  const form = h("form", { className: "hitl-form", onsubmit: (e) => e.preventDefault() });
  const send = async (options, buttons) => {
    replace(message);
    const params = {};
    for (const field of fields) {
      const [value, problem] = field.read();
      if (problem) {
        replace(message, h("div", { className: "error", role: "alert" }, `${field.name}: ${problem}`));
        return;
      }
      params[field.name] = value;
    }
    if (!options.length) {
      replace(message, h("div", { className: "error", role: "alert" }, "Choose at least one option."));
      return;
    }
    buttons.forEach((b) => (b.disabled = true));
    try {
      const body = { chosen_options: options, params_input: params };
      await api(hitlPath(request.dag_id, request.dag_run_id, request.task_id, request.map_index), { method: "PATCH", body });
    } catch (error) {
      buttons.forEach((b) => (b.disabled = false));
      // 409: answered meanwhile, or the task stopped waiting: show what it is now.
      if (error.status === 409) await answered(errorBox(error));
      else replace(message, errorBox(error));
      return;
    }
    await answered(null);
  };
  if (!ctx.isAdmin) {
    return h("div", {}, h("p", {}, "Options: ", request.options.map((o) => h("span", { className: "option-chip" }, o))), h("p", { className: "muted" }, "Waiting for an admin to respond."));
  }
  let actions;
  if (request.multiple) {
    const boxes = request.options.map((o) => h("input", { type: "checkbox", value: o, checked: chosen.has(o), dataset: { option: o } }));
    const submit = h("button", { type: "submit", className: "primary", id: "hitl-submit", onclick: () => send(boxes.filter((b) => b.checked).map((b) => b.value), [submit]) }, "Respond");
    actions = [h("div", { className: "hitl-options", role: "group", "aria-label": "Options (one or more)" }, h("span", { className: "muted small" }, "Choose one or more:"), boxes.map((b) => h("label", { className: "check" }, b, b.value))), h("div", { className: "hitl-actions" }, submit)];
  } else {
    const buttons = [];
    for (const o of request.options) {
      // Not submit buttons: Enter in a param's field must not choose the first option.
      buttons.push(h("button", { type: "button", className: chosen.has(o) ? "primary" : "", dataset: { option: o }, title: chosen.has(o) ? "The default, taken if nobody answers in time" : "", onclick: () => send([o], buttons) }, o));
    }
    actions = [h("div", { className: "hitl-actions" }, h("span", { className: "muted small" }, "Choose one:"), buttons)];
  }
  replace(form, fields.length ? h("div", { className: "hitl-params" }, fields.map((f) => f.element)) : null, actions, message);
  return form;
}

// The JSON schema type a field is made for ("string" when the schema says nothing).
function fieldType(schema) {
  if (schema.enum) return "enum";
  const types = [schema.type ?? "string"].flat().filter((t) => t !== "null");
  return types.length === 1 ? types[0] : "json";
}

function paramField(name, param) {
  const schema = param.schema ?? {};
  const value = param.value;
  const id = `hitl-param-${name}`;
  const type = fieldType(schema);
  let input;
  let read;
  if (type === "boolean") {
    input = h("input", { type: "checkbox", id, checked: Boolean(value) });
    read = () => [input.checked, null];
  } else if (type === "enum") {
    input = h("select", { id }, schema.enum.map((v) => h("option", { value: JSON.stringify(v), selected: v === value }, String(v))));
    read = () => [JSON.parse(input.value), null];
  } else if (type === "integer" || type === "number") {
    input = h("input", { type: "number", id, step: type === "integer" ? "1" : "any", value: value ?? "" });
    read = () => (input.value === "" ? [null, null] : [Number(input.value), null]);
  } else if (type === "string") {
    input = h("input", { id, value: value ?? "", placeholder: schema.format ?? "" });
    read = () => [input.value, null];
  } else {
    input = h("textarea", { id, rows: 3, spellcheck: "false" });
    input.value = value === null || value === undefined ? "" : json(value);
    read = () => {
      try {
        return [input.value.trim() ? JSON.parse(input.value) : null, null];
      } catch (error) {
        return [null, `not valid JSON (${error.message})`];
      }
    };
  }
  const label = h("label", { for: id }, h("code", {}, name), param.description ? h("span", { className: "muted" }, ` — ${param.description}`) : null);
  return { name, read, element: h("div", { className: type === "boolean" ? "hitl-param check-param" : "hitl-param" }, label, input) };
}

// Where the requests of a run still waiting are named, with a link to each.
export function waitingNotice(requests, dagId, runId) {
  if (!requests.length) return null;
  return h(
    "div",
    { className: "notice hitl-notice", id: "hitl-waiting" },
    h("strong", {}, requests.length === 1 ? "A task awaits a response: " : `${requests.length} tasks await a response: `),
    requests.map((r, i) => [i ? ", " : "", h("a", { href: taskHref(dagId, runId, r.task_id, r.map_index >= 0 ? r.map_index : null) }, `${instanceName(r)} — ${r.subject}`)]),
  );
}
