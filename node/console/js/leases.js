// The Leases page: every lease with its time to live counting down and the keys attached to it;
// a lease can be revoked (its keys go with it). Refreshed from the member every few seconds, the
// countdown in between is the page's own.

import { call, describe, get } from "./api.js";
import { fromBase64, keyLabel } from "./bytes.js";
import { h, link, notice, page, replace, table } from "./dom.js";
import { bytesParameters } from "./keys.js";

const REFRESH_MILLISECONDS = 5000;
// Leases whose details are asked per refresh: each is one request.
const MOST_LEASES = 200;

export function renderLeases(main, parameters) {
  const chosen = parameters.get("id");
  const body = h("div", { "data-testid": "leases" }, h("p", { class: "muted" }, "Loading…"));
  replace(main, h("h1", {}, "Leases"), body);
  let stopped = false;
  let refreshTimer = null;
  let leases = [];
  let fetchedAt = 0;
  const countdown = setInterval(() => updateCountdowns(body, fetchedAt), 1000);
  async function refresh() {
    try {
      leases = await loadLeases(chosen);
      fetchedAt = performance.now();
      if (!stopped) replace(body, ...leasesView(leases, refresh));
    } catch (error) {
      if (!stopped) replace(body, notice("error", describe(error)));
    }
    if (!stopped) refreshTimer = setTimeout(refresh, REFRESH_MILLISECONDS);
  }
  refresh();
  return () => {
    stopped = true;
    clearTimeout(refreshTimer);
    clearInterval(countdown);
  };
}

async function loadLeases(chosen) {
  const listed = await get("/v1/leases");
  const ids = listed.leases.map((lease) => String(lease.id)).filter((id) => !chosen || id === chosen).slice(0, MOST_LEASES);
  const details = await Promise.all(ids.map((id) => get(`/v1/leases/${id}?keys=true&encoding=base64`).catch((error) => ({ id, error }))));
  return details;
}

function leasesView(leases, refresh) {
  if (leases.length === 0) return [h("p", {}, "No leases.")];
  return [table(["Lease", "Time to live", "Granted", "Keys", ""], leases.map((lease) => {
    if (lease.error) return [String(lease.id), notice("error", describe(lease.error)), "", "", ""];
    const keys = (lease.keys || []).map((key) => fromBase64(key));
    return {
      cells: [
        String(lease.id),
        h("span", { "data-ttl": lease.ttl, "data-testid": "lease-ttl" }, `${lease.ttl} s`),
        `${lease.granted_ttl} s`,
        keys.length === 0 ? h("span", { class: "muted" }, "none") : keys.map((key) => h("div", {}, link(page("keys", bytesParameters("key", key)), keyLabel(key)))),
        h("button", { type: "button", class: "danger", onclick: () => revoke(lease.id, refresh) }, "Revoke"),
      ],
      attributes: { "data-lease-id": lease.id },
    };
  }), { "data-testid": "lease-table" })];
}

function updateCountdowns(body, fetchedAt) {
  const elapsed = Math.floor((performance.now() - fetchedAt) / 1000);
  for (const cell of body.querySelectorAll("[data-ttl]")) {
    const left = Math.max(0, Number(cell.dataset.ttl) - elapsed);
    cell.textContent = left === 0 ? "expiring" : `${left} s`;
  }
}

async function revoke(id, refresh) {
  if (!window.confirm(`Revoke lease ${id}? Its keys are deleted with it.`)) return;
  try {
    await call("DELETE", `/v1/leases/${id}`);
  } catch (error) {
    window.alert(describe(error));
  }
  refresh();
}
