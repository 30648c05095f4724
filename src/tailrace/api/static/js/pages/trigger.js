// The trigger dialog: an optional run id and the conf as JSON, checked as it is typed;
// the API's own errors (a conf failing the DAG's params, a taken run id) shown inline.

import { api, p } from "../api.js";
import { errorBox, h, json, replace } from "../dom.js";
import { runHref } from "../links.js";

export async function openTriggerDialog(dagId, ctx) {
  const structure = await api(p`/ui/dags/${dagId}/structure`);
  const defaults = Object.fromEntries(
    Object.entries(structure.params).filter(([, param]) => param.has_default).map(([name, param]) => [name, param.default]),
  );
  const conf = h("textarea", { id: "conf", name: "conf", rows: 10, spellcheck: "false" });
  conf.value = json(defaults);
  const runId = h("input", { id: "run-id", name: "run_id", placeholder: "generated when empty" });
  const problem = h("div", { className: "field-error", id: "conf-problem" });
  const message = h("div");
  const submit = h("button", { type: "submit", className: "primary", id: "trigger-submit" }, "Trigger");
  const paramsHelp = Object.keys(structure.params).length
    ? h(
        "ul",
        { className: "params" },
        Object.entries(structure.params).map(([name, param]) =>
          h("li", {}, h("code", {}, name), param.description ? ` — ${param.description}` : "", param.has_default ? h("span", { className: "muted" }, ` (default ${JSON.stringify(param.default)})`) : h("strong", {}, " (required)")),
        ),
      )
    : h("p", { className: "muted" }, "This DAG declares no params; any JSON object is passed to its tasks as dag_run.conf.");
  const dialog = h(
    "dialog",
    { className: "dialog", id: "trigger-dialog" },
    h(
      "form",
      { method: "dialog", onsubmit: send },
      h("h2", {}, "Trigger ", h("code", {}, dagId)),
      h("label", { for: "run-id" }, "Run id"),
      runId,
      h("label", { for: "conf" }, "Configuration (JSON object)"),
      conf,
      problem,
      paramsHelp,
      message,
      h(
        "div",
        { className: "actions" },
        h("button", { type: "button", className: "ghost", onclick: () => dialog.close() }, "Cancel"),
        submit,
      ),
    ),
  );
  conf.addEventListener("input", check);
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();

  function parsed() {
    try {
      const value = JSON.parse(conf.value || "{}");
      if (value === null || typeof value !== "object" || Array.isArray(value)) return [null, "The configuration must be a JSON object: { … }"];
      return [value, null];
    } catch (error) {
      return [null, `Not valid JSON: ${error.message}`];
    }
  }

  function check() {
    const [, error] = parsed();
    replace(problem, error ?? "");
    conf.classList.toggle("invalid", Boolean(error));
    submit.disabled = Boolean(error);
    return !error;
  }

  async function send(event) {
    event.preventDefault();
    if (!check()) return;
    replace(message);
    submit.disabled = true;
    try {
      const body = { conf: parsed()[0] };
      if (runId.value.trim()) body.run_id = runId.value.trim();
      const created = await api(p`/dags/${dagId}/runs`, { method: "POST", body });
      dialog.close();
      ctx.navigate(runHref(dagId, created.run_id));
    } catch (error) {
      replace(message, errorBox(error));
      submit.disabled = false;
    }
  }
}

export function pauseToggle(dag, ctx, onChange = () => {}) {
  if (!ctx.isAdmin) {
    return h("span", { className: dag.paused ? "pill paused" : "pill active" }, dag.paused ? "paused" : "active");
  }
  const input = h("input", {
    type: "checkbox",
    checked: !dag.paused,
    "aria-label": `${dag.paused ? "Unpause" : "Pause"} ${dag.dag_id}`,
    dataset: { pause: dag.dag_id },
    onchange: async () => {
      input.disabled = true;
      try {
        onChange(await api(p`/dags/${dag.dag_id}`, { method: "PATCH", body: { is_paused: !input.checked } }));
      } catch (error) {
        input.checked = !input.checked;
        alert(error.message);
      } finally {
        input.disabled = false;
      }
    },
  });
  return h("label", { className: "switch", title: dag.paused ? "Paused: no scheduled runs. Click to unpause." : "Active. Click to pause scheduled runs." }, input, h("span", { className: "slider" }));
}

export function triggerButton(dagId, ctx) {
  if (!ctx.isAdmin) return null;
  return h("button", { className: "primary small trigger", dataset: { trigger: dagId }, title: "Trigger a run with a configuration", onclick: () => openTriggerDialog(dagId, ctx).catch((e) => alert(e.message)) }, "▶ Trigger");
}
