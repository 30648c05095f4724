// Required actions (Airflow 3.1's name): every human-in-the-loop request waiting for a
// response, oldest first, each answerable here; then the latest responses given.

import { api } from "../api.js";
import { empty, h, replace, when } from "../dom.js";
import { pendingRequests, requestCard } from "../hitl.js";
import { taskHref } from "../links.js";

const ANSWERED_SHOWN = 50;

export async function render(root, _params, query, ctx) {
  document.title = "Required actions · Tailrace";
  const dagId = query.get("dag_id");
  const pending = h("div", { id: "hitl-pending" });
  const answered = h("div", { className: "card", id: "hitl-answered" });
  root.append(
    h("div", { className: "page-head" }, h("h1", {}, "Required actions")),
    h("p", { className: "muted" }, "Human-in-the-loop tasks wait in the triggerer, holding no worker, until someone responds here, with ", h("code", {}, "tailrace hitl respond"), ", or through the REST API."),
    pending,
    h("h2", {}, "Answered"),
    answered,
  );
  const filter = dagId ? `&dag_id=${encodeURIComponent(dagId)}` : "";
  const loadAnswered = async () => {
    const rows = (await api(`/hitlDetails?response_received=true${filter}`)).hitl_details;
    const latest = rows.sort((a, b) => Date.parse(b.responded_at) - Date.parse(a.responded_at)).slice(0, ANSWERED_SHOWN);
    replace(answered, latest.length ? answeredTable(latest) : h("p", { className: "muted pad" }, "No responses yet."));
  };
  const open = await pendingRequests(dagId);
  replace(
    pending,
    open.length
      ? open.map((r) => requestCard(r, ctx, { link: true, onAnswered: loadAnswered }))
      : empty("Nothing awaits a response", "A task such as ", h("code", {}, "ApprovalOperator"), " or ", h("code", {}, "HITLOperator"), " appears here while it waits."),
  );
  await loadAnswered();
}

function answeredTable(rows) {
  return h(
    "table",
    { className: "table", id: "hitl-answered-table" },
    h("thead", {}, h("tr", {}, ["Task", "Subject", "Response", "By", "When"].map((c) => h("th", {}, c)))),
    h(
      "tbody",
      {},
      rows.map((r) =>
        h(
          "tr",
          { dataset: { task: r.task_id, run: r.dag_run_id } },
          h("td", {}, h("a", { href: taskHref(r.dag_id, r.dag_run_id, r.task_id, r.map_index >= 0 ? r.map_index : null) }, `${r.dag_id} / ${r.task_id}${r.map_index >= 0 ? ` [${r.map_index}]` : ""}`), h("div", { className: "muted small" }, r.dag_run_id)),
          h("td", {}, r.subject),
          h("td", {}, r.chosen_options.map((o) => h("span", { className: "option-chip" }, o))),
          h("td", {}, r.responded_by ?? h("span", { className: "muted" }, "the timeout")),
          h("td", { className: "nowrap" }, when(r.responded_at)),
        ),
      ),
    ),
  );
}
