// Where each page lives: hash routes with every path segment encoded.

const e = encodeURIComponent;
export const dagHref = (dagId, tab = "") => `#/dags/${e(dagId)}${tab ? `/${tab}` : ""}`;
export const runHref = (dagId, runId) => `#/dags/${e(dagId)}/runs/${e(runId)}`;
export const streamsHref = (dagId, runId) => `${runHref(dagId, runId)}/streams`;
export function taskHref(dagId, runId, taskId, mapIndex = null, tryNumber = null) {
  const query = new URLSearchParams();
  if (mapIndex !== null && mapIndex !== undefined) query.set("map_index", mapIndex);
  if (tryNumber) query.set("try", tryNumber);
  const q = query.toString();
  return `${runHref(dagId, runId)}/tasks/${e(taskId)}${q ? `?${q}` : ""}`;
}
