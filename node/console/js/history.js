// The History page, the seeds' version debugger: one key's versions on a timeline (puts, deletes,
// the lease each was written under), what any version held, and the difference between any two,
// field by field for JSON. Versions before the compact revision are gone, and the page says so.

import { ApiError, describe, get } from "./api.js";
import { fromBase64, fromText, keyLabel } from "./bytes.js";
import { diffView } from "./diff.js";
import { h, link, notice, page, replace } from "./dom.js";
import { bytesParameter, bytesParameters, keyPath } from "./keys.js";
import { valueView } from "./values.js";

// Versions asked per request, and at most shown: the timeline is for reading, not for export.
const VERSIONS_PER_REQUEST = 100;
const MOST_VERSIONS = 1000;

export function renderHistory(main, parameters, navigate) {
  const hasKey = parameters.has("key") || parameters.has("key64");
  const key = bytesParameter(parameters, "key");
  const input = h("input", { id: "history-key", value: parameters.get("key") || "", size: 40 });
  const form = h("form", { class: "toolbar" },
    h("label", { for: "history-key" }, "Key"), input, h("button", { type: "submit" }, "Show history"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    navigate(page("history", bytesParameters("key", fromText(input.value))));
  });
  const body = h("div", { "data-testid": "history" });
  replace(main, h("h1", {}, "History"), form, body);
  if (!hasKey) {
    replace(body, h("p", { class: "muted" }, "Name a key to see every version the store still keeps."));
    return;
  }
  loadHistory(key, body, parameters);
}

async function loadHistory(key, body, parameters) {
  replace(body, h("p", { class: "muted" }, "Loading…"));
  let versions = [];
  let status;
  try {
    status = await get("/v1/status");
    let token = null;
    do {
      const query = token ? `&continue=${encodeURIComponent(token)}` : "";
      const answer = await get(`${keyPath(key)}&history=true&limit=${VERSIONS_PER_REQUEST}${query}`);
      versions = versions.concat(answer.versions);
      token = answer.more ? answer.continue : null;
    } while (token && versions.length < MOST_VERSIONS);
  } catch (error) {
    const text = error instanceof ApiError && error.code === "compacted"
      ? `The history was compacted through revision ${error.body.compact_revision} while it was read; try again.`
      : describe(error);
    replace(body, notice("error", text));
    return;
  }
  replace(body, ...historyView(key, versions, status, parameters));
}

/** The key's folder: everything up to and including its last "/". */
function folderOf(key) {
  return key.slice(0, key.lastIndexOf(0x2f) + 1);
}

function versionLabel(version) {
  return version.type === "DELETE" ? `revision ${version.kv.mod_revision}: deleted` : `revision ${version.kv.mod_revision}: version ${version.kv.version}`;
}

function historyView(key, versions, status, parameters) {
  const parts = [h("h2", {}, keyLabel(key)),
    h("p", {}, link(page("keys", { ...bytesParameters("prefix", folderOf(key)), ...bytesParameters("key", key) }), "Open in Keys"))];
  if (status.compact_revision > 0) {
    parts.push(notice("warning", `Compacted through revision ${status.compact_revision}: versions superseded before it are gone.`));
  }
  if (versions.length === 0) {
    parts.push(h("p", { "data-testid": "no-versions" }, "The store keeps no version of this key."));
    return parts;
  }
  if (versions.length >= MOST_VERSIONS) parts.push(notice("warning", `Only the oldest ${MOST_VERSIONS} versions kept are shown.`));
  const shown = h("div", { "data-testid": "version-value" });
  const showVersion = (version) => replace(shown,
    h("h2", {}, versionLabel(version)),
    version.type === "DELETE" ? h("p", {}, "Deleted here.") : valueView(fromBase64(version.kv.value)));
  const timeline = h("ol", { class: "timeline", "data-testid": "timeline" }, versions.map((version) => {
    const kv = version.kv;
    const lease = kv.lease && kv.lease !== "0" && kv.lease !== 0 ? ["under lease ", link(page("leases", { id: kv.lease }), String(kv.lease))] : null;
    return h("li", { class: version.type === "DELETE" ? "deleted" : null, "data-revision": kv.mod_revision, "data-type": version.type },
      h("button", { type: "button", onclick: () => showVersion(version) }, versionLabel(version)),
      version.type === "PUT" ? h("span", { class: "muted" }, ` created at ${kv.create_revision} `) : null,
      lease);
  }));
  const puts = versions.filter((version) => version.type === "PUT");
  const chooser = (id, chosen) => {
    const select = h("select", { id, "data-testid": id }, versions.map((version, index) =>
      h("option", { value: String(index), selected: index === chosen }, versionLabel(version))));
    return select;
  };
  const wanted = (name, fallback) => {
    const revision = Number(parameters.get(name));
    const index = versions.findIndex((version) => version.kv.mod_revision === revision);
    return index >= 0 ? index : fallback;
  };
  // By default: the last two values written (a delete between them is on the timeline).
  const lastPut = versions.indexOf(puts[puts.length - 1]);
  const previousPut = puts.length > 1 ? versions.indexOf(puts[puts.length - 2]) : Math.max(0, lastPut - 1);
  const before = chooser("diff-from", wanted("from", previousPut));
  const after = chooser("diff-to", wanted("to", lastPut));
  const difference = h("div", {});
  const compare = () => {
    const valueOf = (index) => (versions[index].type === "DELETE" ? new Uint8Array(0) : fromBase64(versions[index].kv.value));
    replace(difference, diffView(valueOf(Number(before.value)), valueOf(Number(after.value))));
  };
  before.addEventListener("change", compare);
  after.addEventListener("change", compare);
  compare();
  showVersion(versions[versions.length - 1]);
  parts.push(h("div", { class: "split" },
    h("section", { "aria-label": "Versions" }, h("h2", {}, `${versions.length} versions`), timeline),
    h("section", { "aria-label": "Compare" },
      h("h2", {}, "Compare"),
      h("div", { class: "toolbar" }, h("label", { for: "diff-from" }, "From"), before, h("label", { for: "diff-to" }, "to"), after),
      difference, shown)));
  return parts;
}
