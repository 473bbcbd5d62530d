// The Cluster page: every member's role, term, leader, revision, log positions, file sizes,
// quota, alarms and version, as the member serving the console sees them
// (GET /v1/cluster/status, which asks every member over the peer port). It refreshes itself; a
// member that does not answer, has no leader, or falls behind stands out.

import { describe, get } from "./api.js";
import { facts, h, notice, replace, table } from "./dom.js";
import { formatBytes } from "./bytes.js";

const REFRESH_MILLISECONDS = 2000;
// A follower this many entries behind the highest commit index is shown as behind: a few entries
// are normal under load (they are in flight), thousands are not.
const BEHIND_ENTRIES = 1000;

export function renderCluster(main) {
  const body = h("div", { "data-testid": "cluster" }, h("p", { class: "muted" }, "Loading…"));
  const updated = h("span", { class: "muted", "aria-live": "off" });
  replace(main, h("h1", {}, "Cluster ", updated), body);
  let stopped = false;
  let timer = null;
  async function refresh() {
    try {
      const [cluster, alarms] = await Promise.all([get("/v1/cluster/status"), get("/v1/alarms")]);
      if (stopped) return;
      replace(body, ...view(cluster, alarms.alarms || []));
      replace(updated, `· updated ${new Date().toLocaleTimeString()}`);
    } catch (error) {
      if (stopped) return;
      replace(body, notice("error", `This member did not answer: ${describe(error)}`));
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MILLISECONDS);
  }
  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** What each member's row says about it: problems first. */
function problemsOf(member, highestCommit) {
  const status = member.status;
  if (!status) return [["bad", "unreachable"]];
  const problems = [];
  if (status.leader_id === null || status.leader_id === undefined) problems.push(["bad", "no leader"]);
  const behind = highestCommit - status.applied_index;
  if (behind > BEHIND_ENTRIES) problems.push(["warn", `behind by ${behind} entries`]);
  if (!status.client_urls_published) problems.push(["warn", "client URLs not published"]);
  return problems;
}

function view(cluster, alarms) {
  const statuses = cluster.members.map((member) => member.status).filter(Boolean);
  const highestCommit = Math.max(0, ...statuses.map((status) => status.commit_index));
  const leaders = new Set(statuses.map((status) => status.leader_id).filter((id) => id !== null && id !== undefined));
  const quota = cluster.quota_backend_bytes;
  const rows = cluster.members.map((member) => rowOf(member, highestCommit, quota));
  const leaderText = leaders.size === 1 ? `member ${[...leaders][0]}` : leaders.size === 0 ? "none" : `members disagree: ${[...leaders].join(", ")}`;
  const parts = [
    facts([
      ["Leader", h("span", { "data-testid": "cluster-leader" }, leaderText)],
      ["Members", String(cluster.members.length)],
      ["Answered by", `member ${cluster.header.member_id}`],
      ["Quota", quota ? `${formatBytes(quota)} (member ${cluster.header.member_id}'s --quota-backend-bytes)` : "none"],
    ]),
  ];
  if (leaders.size !== 1) parts.push(notice("error", "The cluster has no single leader: writes and linearizable reads wait or fail until one is elected."));
  parts.push(table(
    ["Member", "Role", "Leader", "Term", "Revision", "Applied", "Committed", "State file", "Log", "Version", "Health"],
    rows, { "data-testid": "members" }));
  parts.push(h("h2", {}, "Alarms"));
  parts.push(alarms.length === 0
    ? h("p", { "data-testid": "alarms" }, "No alarms.")
    : table(["Member", "Alarm"], alarms.map((alarm) => [String(alarm.member_id), alarm.alarm || alarm.kind || JSON.stringify(alarm)]), { "data-testid": "alarms" }));
  return parts;
}

function rowOf(member, highestCommit, quota) {
  const status = member.status;
  const problems = problemsOf(member, highestCommit);
  const worst = problems.some(([kind]) => kind === "bad") ? "bad" : problems.length ? "warn" : null;
  const role = status ? status.role : "?";
  const health = problems.length === 0
    ? h("span", { class: "badge" }, "healthy")
    : problems.map(([kind, text]) => h("span", { class: `badge ${kind}` }, text));
  const cells = [
    h("span", { title: member.client_url }, `${member.id}${member.is_learner ? " (learner)" : ""}`),
    role === "leader" ? h("span", { class: "badge leader" }, "leader") : role,
    status ? String(status.leader_id ?? "none") : "–",
    status ? String(status.raft_term) : "–",
    status ? String(status.revision) : "–",
    status ? String(status.applied_index) : "–",
    status ? String(status.commit_index) : "–",
    status ? stateFileText(status, quota) : "–",
    status ? formatBytes(status.log_db_bytes) : "–",
    status ? status.version : "–",
    [health, member.error ? h("div", { class: "muted" }, member.error) : null],
  ];
  return {
    cells,
    class: worst,
    attributes: { "data-member-id": member.id, "data-role": role, "data-health": worst || "healthy" },
  };
}

function stateFileText(status, quota) {
  const size = formatBytes(status.state_db_bytes);
  const used = `${formatBytes(status.state_db_bytes_in_use)} in use`;
  const share = quota ? `, ${((100 * status.state_db_bytes) / quota).toFixed(1)}% of quota` : "";
  return `${size} (${used}${share})`;
}
