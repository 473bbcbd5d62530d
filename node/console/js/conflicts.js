// The Conflicts page: this member's conflicts and client retries per interval over the last
// minutes (GET /v1/conflicts/rates) as a chart, and its hottest conflicting keys and prefixes over
// the hot-key window (GET /v1/conflicts, root only while auth is enabled). A key opens its history.

import { ApiError, describe, get } from "./api.js";
import { fromBase64, keyLabel } from "./bytes.js";
import { lineChart } from "./chart.js";
import { h, link, notice, page, replace, table } from "./dom.js";
import { bytesParameters } from "./keys.js";

const REFRESH_MILLISECONDS = 5000;
const TOP_KEYS = 20;

export function renderConflicts(main) {
  const chart = h("div", { "data-testid": "conflict-chart" });
  const keys = h("div", { "data-testid": "hot-keys" });
  replace(main, h("h1", {}, "Conflicts"),
    h("p", { class: "muted" }, "Failed revision preconditions (409s and failed txn compares) and client retries answered by this member."),
    chart, h("h2", {}, "Hottest keys"), keys);
  let stopped = false;
  let timer = null;
  async function refresh() {
    await Promise.all([drawRates(chart), listHotKeys(keys)]);
    if (!stopped) timer = setTimeout(refresh, REFRESH_MILLISECONDS);
  }
  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

async function drawRates(element) {
  try {
    const rates = await get("/v1/conflicts/rates");
    const seconds = rates.interval_seconds;
    const labels = rates.intervals.map((interval) => new Date(interval.start_unix_seconds * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
    const perSecond = (name) => rates.intervals.map((interval) => interval[name] / seconds);
    const total = (name) => rates.intervals.reduce((sum, interval) => sum + interval[name], 0);
    const minutes = Math.round((rates.intervals.length * seconds) / 60);
    replace(element,
      h("p", { class: "legend" },
        h("span", { class: "conflicts" }, "■ conflicts/s"), "  ", h("span", { class: "retries" }, "■ retries/s"),
        h("span", { class: "muted" }, ` · last ${minutes} minutes in ${seconds}-second steps: `),
        h("span", { "data-testid": "conflicts-total" }, String(total("conflicts"))), " conflicts, ",
        h("span", { "data-testid": "retries-total" }, String(total("retries"))), " retries"),
      lineChart(labels, [
        { name: "conflicts", class: "conflicts", values: perSecond("conflicts") },
        { name: "retries", class: "retries", values: perSecond("retries") },
      ], { title: "Conflicts and retries per second" }));
  } catch (error) {
    replace(element, notice("error", describe(error)));
  }
}

function firstSegment(bytes) {
  const slash = bytes.indexOf(0x2f);
  return slash < 0 ? null : bytes.slice(0, slash + 1);
}

async function listHotKeys(element) {
  let answer;
  try {
    answer = await get(`/v1/conflicts?top=${TOP_KEYS}&encoding=base64`);
  } catch (error) {
    const text = error instanceof ApiError && error.code === "forbidden"
      ? "The hottest keys name keys, so only root may list them while auth is enabled."
      : describe(error);
    replace(element, notice(error.code === "forbidden" ? "warning" : "error", text));
    return;
  }
  const minutes = Math.round(answer.window_seconds / 60);
  if (answer.keys.length === 0) {
    replace(element, h("p", {}, `No conflicts in the last ${minutes} minutes.`));
    return;
  }
  const prefixes = new Map();
  for (const hot of answer.keys) {
    const segment = firstSegment(fromBase64(hot.key));
    const label = segment ? keyLabel(segment) : "(no prefix)";
    const counts = prefixes.get(label) || { conflicts: 0, retries: 0 };
    counts.conflicts += hot.conflicts;
    counts.retries += hot.retries;
    prefixes.set(label, counts);
  }
  const byPrefix = [...prefixes.entries()].sort((a, b) => (b[1].conflicts + b[1].retries) - (a[1].conflicts + a[1].retries));
  replace(element,
    h("p", { class: "muted" }, `Over the last ${minutes} minutes, hottest first.`),
    table(["Key", "Conflicts", "Retries", "Last at revision"], answer.keys.map((hot) => {
      const key = fromBase64(hot.key);
      return { cells: [link(page("history", bytesParameters("key", key)), keyLabel(key)), String(hot.conflicts), String(hot.retries), String(hot.last_revision)], attributes: { "data-key": keyLabel(key) } };
    }), { "data-testid": "hot-key-table" }),
    h("h2", {}, "By prefix (first segment, of the keys above)"),
    table(["Prefix", "Conflicts", "Retries"], byPrefix.map(([label, counts]) => [label, String(counts.conflicts), String(counts.retries)]), { "data-testid": "hot-prefix-table" }));
}
