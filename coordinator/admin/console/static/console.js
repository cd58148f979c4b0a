// The console's script (coordinator/admin/console): fills the page from the /v1 JSON API and redraws it live.
// Plain ES2020, no build step, no dependencies. Everything shown is made with DOM calls (never innerHTML), so
// group ids, client ids and reasons are text, whatever they contain.

const REFRESH_MS = 2000;
const MAX_ROWS = 500; // groups drawn at once; the filter narrows the rest
const TOKEN_KEY = "kgc-admin-token";
const SVG_NS = "http://www.w3.org/2000/svg";
const COLORS = ["#0b57d0", "#b3261e", "#1b6e2a", "#8a5300", "#6a1b9a", "#00695c", "#ad1457", "#37474f"];
const OUTCOME_COLORS = { stable: "#1b6e2a", empty: "#555555", superseded: "#8a5300", in_progress: "#0b57d0" };

const body = document.body;
const app = document.getElementById("app");
const statusBox = document.getElementById("status");
const updated = document.getElementById("updated");
const live = document.getElementById("live");

// -- small helpers -------------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") el.textContent = String(v);
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

function append(el, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function fmt(n) {
  return n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US");
}

function fmtSeconds(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1) return `${Math.round(v * 1000)} ms`;
  if (v < 120) return `${v.toFixed(1)} s`;
  if (v < 7200) return `${(v / 60).toFixed(1)} min`;
  return `${(v / 3600).toFixed(1)} h`;
}

function fmtMs(v) {
  return v === null || v === undefined ? "—" : fmtSeconds(v / 1000);
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString("en-GB", { hour12: false });
}

function stateBadge(state) {
  return h("span", { class: `badge state-${String(state).toLowerCase()}`, text: state });
}

function pausedText(paused) {
  if (!paused) return "—";
  if (paused.group) {
    const resumed = paused.resumed_topics || [];
    return resumed.length ? `whole group (except ${resumed.join(", ")})` : "whole group";
  }
  return `topics: ${(paused.topics || []).join(", ")}`;
}

function groupPath(id) {
  return encodeURIComponent(id);
}

function say(text, isError = false) {
  statusBox.textContent = text;
  statusBox.classList.toggle("error", isError);
}

class ApiFailure extends Error {
  constructor(status, data) {
    super((data && data.message) || `HTTP ${status}`);
    this.status = status;
    this.data = data;
  }
}

async function api(method, path, payload) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token && method !== "GET") headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store" };
  if (payload !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(payload);
  }
  const resp = await fetch(path, init);
  let data = null;
  try {
    data = await resp.json();
  } catch (_) {
    data = null;
  }
  if (!resp.ok) throw new ApiFailure(resp.status, data);
  return { status: resp.status, data };
}

function failureText(err) {
  if (err instanceof ApiFailure) {
    if (err.status === 401 || err.status === 403) {
      return `Refused (${err.status}): ${err.message}. Enter the admin token above (or use a client certificate).`;
    }
    const code = err.data && err.data.error ? `${err.data.error}: ` : "";
    return `${code}${err.message} (HTTP ${err.status})`;
  }
  return `The coordinator did not answer: ${err.message}`;
}

// A table whose header is made once (so focus and sort buttons survive refreshes) and whose body is redrawn.
function sortableTable(label, columns, sortState, onSort) {
  const headRow = h("tr");
  for (const col of columns) {
    const th = h("th", { scope: "col", class: col.num ? "num" : null });
    if (col.sort) {
      th.append(h("button", { type: "button", onclick: () => onSort(col.key) }, col.title, h("span", { class: "arrow", "aria-hidden": "true" })));
    } else {
      th.textContent = col.title;
    }
    th.dataset.key = col.key;
    headRow.append(th);
  }
  const tbody = h("tbody");
  const table = h("table", { "aria-label": label }, h("thead", {}, headRow), tbody);
  const markSort = () => {
    for (const th of headRow.children) {
      const arrow = th.querySelector(".arrow");
      if (th.dataset.key === sortState.key) {
        th.setAttribute("aria-sort", sortState.desc ? "descending" : "ascending");
        if (arrow) arrow.textContent = sortState.desc ? " ▼" : " ▲";
      } else {
        th.removeAttribute("aria-sort");
        if (arrow) arrow.textContent = "";
      }
    }
  };
  markSort();
  return { table, tbody, markSort };
}

function simpleTable(label, headers, rows, numeric = []) {
  return h(
    "table",
    { "aria-label": label },
    h("thead", {}, h("tr", {}, headers.map((t, i) => h("th", { scope: "col", class: numeric.includes(i) ? "num" : null, text: t })))),
    h(
      "tbody",
      {},
      rows.map((cells) => h("tr", {}, cells.map((c, i) => h("td", { class: numeric.includes(i) ? "num" : null }, c)))),
    ),
  );
}

// -- live refresh -----------------------------------------------------------------------------------------------

let timer = null;
let refreshing = false;
let refreshFn = async () => {};

// The next refresh waits at least 10 times what the last one took, so a coordinator with very many groups (whose
// answers take long to compute) is not kept busy by an open page.
let nextWaitMs = REFRESH_MS;
let refreshFailed = false;

async function refresh() {
  if (refreshing) return;
  refreshing = true;
  clearTimeout(timer);
  const started = performance.now();
  try {
    await refreshFn();
    updated.textContent = `Updated ${clock(Date.now())}`;
    app.setAttribute("aria-busy", "false");
    if (refreshFailed) say(""); // the coordinator answers again: the error shown is no longer true
    refreshFailed = false;
  } catch (err) {
    say(failureText(err), true);
    refreshFailed = true;
  } finally {
    refreshing = false;
    nextWaitMs = Math.max(REFRESH_MS, 10 * (performance.now() - started));
    if (live.checked) timer = setTimeout(refresh, nextWaitMs);
  }
}

live.addEventListener("change", () => {
  clearTimeout(timer);
  if (live.checked) refresh();
});

const tokenForm = document.getElementById("token-form");
const tokenInput = document.getElementById("token");
tokenInput.value = sessionStorage.getItem(TOKEN_KEY) || "";
tokenForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  if (tokenInput.value) sessionStorage.setItem(TOKEN_KEY, tokenInput.value);
  else sessionStorage.removeItem(TOKEN_KEY);
  say(tokenInput.value ? "The admin token is used for this tab's changes." : "No admin token in use.");
});

// -- the groups page --------------------------------------------------------------------------------------------

function groupsPage() {
  const sort = { key: "group_id", desc: false };
  let groups = [];
  const filterInput = h("input", { type: "search", id: "filter", placeholder: "group id or topic" });
  const stateSelect = h(
    "select",
    { id: "state-filter" },
    ["All", "Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead"].map((v) => h("option", { value: v, text: v })),
  );
  const pausedOnly = h("input", { type: "checkbox", id: "paused-only" });
  const count = h("p", { class: "muted", id: "group-count" });
  const columns = [
    { key: "group_id", title: "Group", sort: true },
    { key: "state", title: "State", sort: true },
    { key: "protocol", title: "Type / protocol", sort: true },
    { key: "members", title: "Members", sort: true, num: true },
    { key: "lag", title: "Lag", sort: true, num: true },
    { key: "lag_seconds", title: "Lag (time)", sort: true, num: true },
    { key: "rebalances_last_hour", title: "Rebalances (1 h)", sort: true, num: true },
    { key: "paused", title: "Paused", sort: true },
  ];
  const onSort = (key) => {
    sort.desc = sort.key === key ? !sort.desc : ["lag", "lag_seconds", "members", "rebalances_last_hour"].includes(key);
    sort.key = key;
    table.markSort();
    draw();
  };
  const table = sortableTable("Consumer groups", columns, sort, onSort);
  app.replaceChildren(
    h(
      "div",
      { class: "filters", role: "search" },
      h("label", { for: "filter" }, "Filter", filterInput),
      h("label", { for: "state-filter" }, "State", stateSelect),
      h("label", { class: "inline" }, pausedOnly, "Paused only"),
    ),
    count,
    table.table,
  );
  for (const el of [filterInput, stateSelect, pausedOnly]) el.addEventListener("input", () => draw());

  function sortValue(g, key) {
    if (key === "protocol") return `${g.protocol_type}/${g.protocol}`;
    if (key === "paused") return g.paused ? pausedText(g.paused) : "";
    const v = g[key];
    return v === null || v === undefined ? -1 : v;
  }

  function draw() {
    const needle = filterInput.value.trim().toLowerCase();
    const state = stateSelect.value;
    const shown = groups.filter(
      (g) =>
        (!needle || g.group_id.toLowerCase().includes(needle) || (g.topics || []).some((t) => t.toLowerCase().includes(needle))) &&
        (state === "All" || g.state === state) &&
        (!pausedOnly.checked || g.paused),
    );
    shown.sort((a, b) => {
      const x = sortValue(a, sort.key);
      const y = sortValue(b, sort.key);
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return sort.desc ? -c : c;
    });
    count.textContent =
      shown.length > MAX_ROWS
        ? `${shown.length} of ${groups.length} groups (the first ${MAX_ROWS} shown: filter to narrow)`
        : `${shown.length} of ${groups.length} groups`;
    table.tbody.replaceChildren(
      ...shown.slice(0, MAX_ROWS).map((g) =>
        h(
          "tr",
          { "data-group": g.group_id },
          h("td", {}, h("a", { href: `/ui/groups/${groupPath(g.group_id)}`, class: "mono", text: g.group_id })),
          h("td", {}, stateBadge(g.state)),
          h("td", { text: [g.protocol_type || "—", g.protocol].filter(Boolean).join(" / ") }),
          h("td", { class: "num", text: fmt(g.members) }),
          h("td", { class: "num", text: fmt(g.lag) }),
          h("td", { class: "num", text: fmtSeconds(g.lag_seconds) }),
          h("td", { class: "num", text: fmt(g.rebalances_last_hour) }),
          h("td", { class: g.paused ? "paused" : null, text: pausedText(g.paused) }),
        ),
      ),
    );
    if (!shown.length) {
      table.tbody.append(h("tr", {}, h("td", { colspan: columns.length, class: "muted", text: groups.length ? "No group matches the filter." : "No groups yet." })));
    }
  }

  return async () => {
    groups = (await api("GET", "/v1/groups")).data.groups;
    draw();
  };
}

// -- the group page ---------------------------------------------------------------------------------------------

function summaryList(items) {
  return h(
    "ul",
    { class: "summary" },
    items.map(([k, v, attrs]) => h("li", attrs || {}, h("span", { class: "k", text: k }), h("span", { class: "v" }, v))),
  );
}

// Ticks of a time axis from t0 to t1 in `n` steps: [time, label, text-anchor]; spans under 10 s get tenths of a
// second, and a label equal to the previous one is not repeated.
function timeTicks(t0, t1, n) {
  const fine = t1 - t0 < 10_000;
  const out = [];
  let previous = null;
  for (let i = 0; i <= n; i++) {
    const t = t0 + ((t1 - t0) * i) / n;
    const label = fine ? `${clock(t)}.${Math.floor((t % 1000) / 100)}` : clock(t);
    if (label === previous) continue;
    previous = label;
    out.push([t, label, i === 0 ? "start" : i === n ? "end" : "middle"]);
  }
  return out;
}

// The smallest of 1, 2, 5 times a power of ten (at least 1) that is >= x: a round gap between axis ticks.
function niceStep(x) {
  const power = 10 ** Math.floor(Math.log10(Math.max(x, 1)));
  for (const m of [1, 2, 5, 10]) if (m * power >= x) return m * power;
  return 10 * power;
}

function lagChart(partitions, intervalMs) {
  const W = 1000;
  const H = 260;
  const M = { left: 64, right: 16, top: 14, bottom: 30 };
  const series = partitions.filter((p) => p.points.length);
  const all = series.flatMap((p) => p.points);
  const latestTotal = series.reduce((sum, p) => sum + p.points[p.points.length - 1][1], 0);
  const svg = s("svg", {
    class: "chart",
    id: "lag-chart",
    viewBox: `0 0 ${W} ${H}`,
    role: "img",
    "data-latest-total": latestTotal,
    "data-points": all.length,
  });
  if (!all.length) {
    svg.setAttribute("aria-label", "Lag history: no samples yet");
    svg.append(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle", text: `No samples yet (one every ${fmtMs(intervalMs)})` }));
    return { svg, legend: h("ul", { class: "legend" }) };
  }
  const t0 = Math.min(...all.map((p) => p[0]));
  const t1 = Math.max(...all.map((p) => p[0]), t0 + 1000);
  const highest = Math.max(...all.map((p) => p[1]));
  const step = niceStep(highest / 4);
  const yMax = step * 4;
  const x = (t) => M.left + ((t - t0) / (t1 - t0)) * (W - M.left - M.right);
  const y = (v) => H - M.bottom - (v / yMax) * (H - M.top - M.bottom);
  svg.setAttribute(
    "aria-label",
    `Lag per partition from ${clock(t0)} to ${clock(t1)}; latest total lag ${fmt(latestTotal)} records, highest ${fmt(highest)}`,
  );
  for (let v = 0; v <= yMax; v += step) {
    svg.append(
      s("line", { class: "grid", x1: M.left, x2: W - M.right, y1: y(v), y2: y(v) }),
      s("text", { x: M.left - 6, y: y(v) + 4, "text-anchor": "end", text: fmt(v) }),
    );
  }
  timeTicks(t0, t1, 5).forEach(([t, label, anchor]) => {
    svg.append(s("text", { x: x(t), y: H - 8, "text-anchor": anchor, text: label }));
  });
  svg.append(
    s("line", { class: "axis", x1: M.left, x2: M.left, y1: M.top, y2: H - M.bottom }),
    s("line", { class: "axis", x1: M.left, x2: W - M.right, y1: H - M.bottom, y2: H - M.bottom }),
  );
  const legend = h("ul", { class: "legend", "aria-label": "Partitions" });
  series.forEach((p, i) => {
    const color = COLORS[i % COLORS.length];
    const name = `${p.topic}-${p.partition}`;
    const latest = p.points[p.points.length - 1];
    const line = s("polyline", {
      points: p.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
      fill: "none",
      stroke: color,
      "stroke-width": 2,
      "data-partition": name,
      "data-latest": latest[1],
    });
    line.append(s("title", { text: `${name}: lag ${fmt(latest[1])} at ${clock(latest[0])}` }));
    svg.append(line, s("circle", { cx: x(latest[0]), cy: y(latest[1]), r: 3, fill: color }));
    legend.append(h("li", {}, h("i", { style: null, "data-color": color }), `${name}: ${fmt(latest[1])}`));
  });
  // Colours of the legend swatches: set as properties (the style sheet policy forbids inline style attributes).
  legend.querySelectorAll("i").forEach((el) => {
    el.style.background = el.dataset.color;
  });
  return { svg, legend };
}

function timelineChart(rebalances, nowMs) {
  const W = 1000;
  const ROW = 26;
  const M = { left: 210, right: 150, top: 8, bottom: 30 };
  const H = M.top + M.bottom + Math.max(1, rebalances.length) * ROW;
  const svg = s("svg", { class: "chart", id: "timeline-chart", viewBox: `0 0 ${W} ${H}`, role: "img" });
  if (!rebalances.length) {
    svg.setAttribute("aria-label", "Rebalance timeline: no rebalances recorded");
    svg.append(s("text", { x: W / 2, y: M.top + ROW / 2 + 4, "text-anchor": "middle", text: "No rebalances recorded since the coordinator started" }));
    return svg;
  }
  const ends = rebalances.map((r) => r.started_at_ms + (r.duration_ms ?? r.elapsed_ms ?? Math.max(0, nowMs - r.started_at_ms)));
  const t0 = Math.min(...rebalances.map((r) => r.started_at_ms));
  const t1 = Math.max(...ends, t0 + 1000);
  const x = (t) => M.left + ((t - t0) / (t1 - t0)) * (W - M.left - M.right);
  svg.setAttribute("aria-label", `Rebalance timeline: ${rebalances.length} rebalances from ${clock(t0)} to ${clock(t1)}; details in the table below`);
  timeTicks(t0, t1, 4).forEach(([t, label, anchor]) => {
    svg.append(
      s("line", { class: "grid", x1: x(t), x2: x(t), y1: M.top, y2: H - M.bottom }),
      s("text", { x: x(t), y: H - 8, "text-anchor": anchor, text: label }),
    );
  });
  rebalances.forEach((r, i) => {
    const top = M.top + i * ROW;
    const start = x(r.started_at_ms);
    const width = Math.max(4, x(ends[i]) - start);
    const gen = r.generation ?? "…";
    const ins = r.members_in.length;
    const outs = r.members_out.length;
    const g = s("g", {
      class: "rebalance",
      "data-reason": r.reason,
      "data-outcome": r.outcome,
      "data-generation": r.generation ?? "",
    });
    const tip = [
      `Generation ${r.from_generation} → ${gen}: ${r.reason}${r.client_reason ? ` (${r.client_reason})` : ""}`,
      `started ${clock(r.started_at_ms)}, ${r.duration_ms !== null ? `took ${fmtMs(r.duration_ms)}` : "in progress"}, ${r.outcome}`,
      ...r.members_in.map((m) => `in: ${memberName(m)}`),
      ...r.members_out.map((m) => `out: ${memberName(m)}: ${m.cause || "gone"}`),
    ].join("\n");
    g.append(
      s("title", { text: tip }),
      s("text", { x: 6, y: top + ROW / 2 + 4, text: `gen ${gen} · ${r.reason}` }),
      s("rect", { x: start, y: top + 4, width, height: ROW - 8, rx: 3, fill: OUTCOME_COLORS[r.outcome] || "#555" }),
      s("text", { x: W - M.right + 6, y: top + ROW / 2 + 4, text: `${fmtMs(r.duration_ms ?? r.elapsed_ms)} +${ins} −${outs}` }),
    );
    svg.append(g);
  });
  return svg;
}

// A member as people know it: its client id and host, its instance id when static, and its member id.
function memberName(m) {
  const who = [m.client_id, m.client_host].filter(Boolean).join(" @ ");
  const id = m.group_instance_id ? `${m.group_instance_id}, ${m.member_id}` : m.member_id;
  return who ? `${who} (${id})` : id;
}

function groupPage(groupId) {
  const base = `/v1/groups/${groupPath(groupId)}`;
  const summary = h("div", { id: "summary" });
  // What Pause and Resume act on: the whole group (value "") or one topic.
  const scopeSelect = h("select", { id: "scope" }, h("option", { value: "", text: "the whole group" }));
  const busy = [];
  let previewed = null; // the reset request last previewed: Apply sends exactly it
  let applyButton = null;
  const setBusy = (flag) => {
    busy.forEach((b) => (b.disabled = flag));
    if (!flag && applyButton) applyButton.disabled = previewed === null;
  };
  const button = (text, cls, onclick) => {
    const b = h("button", { type: "button", class: cls, text, onclick });
    busy.push(b);
    return b;
  };

  async function pauseOrResume(what, topics) {
    setBusy(true);
    const which = topics ? `topic ${topics.join(", ")}` : "the group";
    say(`${what === "pause" ? "Pausing" : "Resuming"} ${which}: waiting until every member has synced…`);
    try {
      const { status, data } = await api("POST", `${base}/${what}`, topics ? { topics } : {});
      if (status === 200) say(`${what === "pause" ? "Paused" : "Resumed"} ${which}: in effect after ${fmtMs(data.waited_ms)} (${data.message}).`);
      else say(`${what === "pause" ? "Pause" : "Resume"} of ${which} is recorded but not yet in effect after ${fmtMs(data.waited_ms)}: waiting for ${(data.pending_members || []).join(", ") || "the rebalance"}.`);
    } catch (err) {
      say(failureText(err), true);
    } finally {
      setBusy(false);
      refresh();
    }
  }

  // Offset reset: preview (dry run) first; Apply sends exactly what was previewed.
  const resetTo = h("select", { id: "reset-to" }, ["earliest", "latest", "timestamp", "offset"].map((v) => h("option", { value: v, text: v })));
  const resetValue = h("input", { id: "reset-value", inputmode: "numeric", placeholder: "timestamp ms or offset", size: 16 });
  const resetTopics = h("input", { id: "reset-topics", placeholder: "all committed topics", size: 22 });
  const preview = h("div", { id: "reset-preview" });
  applyButton = button("Apply reset", "danger", async () => {
    if (!previewed) return;
    setBusy(true);
    try {
      const { data } = await api("POST", `${base}/reset-offsets`, { ...previewed, dry_run: false });
      say(`Reset ${data.offsets.length} partitions of ${groupId} to ${data.to}.`);
      preview.replaceChildren();
      previewed = null;
    } catch (err) {
      say(failureText(err), true);
    } finally {
      setBusy(false);
      refresh();
    }
  });
  applyButton.disabled = true;
  function resetBody() {
    const body = { to: resetTo.value };
    const value = resetValue.value.trim();
    if (resetTo.value === "timestamp") body.timestamp_ms = Number(value);
    if (resetTo.value === "offset") body.offset = Number(value);
    const topics = resetTopics.value.split(/[\s,]+/).filter(Boolean);
    if (topics.length) body.topics = topics;
    return body;
  }
  const previewButton = button("Preview", "secondary", async () => {
    const request = resetBody();
    try {
      const { data } = await api("POST", `${base}/reset-offsets`, { ...request, dry_run: true });
      previewed = request;
      applyButton.disabled = false;
      preview.replaceChildren(
        h("p", { text: `Dry run: ${data.offsets.length} partitions would move to ${data.to}. Nothing is written until Apply.` }),
        simpleTable(
          "Offset reset preview",
          ["Topic", "Partition", "Committed now", "New offset", "Log start", "Log end"],
          data.offsets.map((o) => [o.topic, fmt(o.partition), fmt(o.previous), fmt(o.offset), fmt(o.log_start_offset), fmt(o.log_end_offset)]),
          [1, 2, 3, 4, 5],
        ),
      );
      say("Preview ready: check it, then Apply.");
    } catch (err) {
      previewed = null;
      applyButton.disabled = true;
      preview.replaceChildren();
      say(failureText(err), true);
    }
  });
  for (const el of [resetTo, resetValue, resetTopics]) {
    el.addEventListener("input", () => {
      previewed = null;
      applyButton.disabled = true;
    });
  }

  const actions = h(
    "section",
    { "aria-labelledby": "actions-h", class: "panel" },
    h("h2", { id: "actions-h", text: "Actions" }),
    h(
      "div",
      { class: "actions" },
      h(
        "fieldset",
        {},
        h("legend", { text: "Pause and resume" }),
        h("label", { for: "scope" }, "Applies to", scopeSelect),
        button("Pause", null, () => pauseOrResume("pause", scopeSelect.value ? [scopeSelect.value] : undefined)),
        button("Resume", "secondary", () => pauseOrResume("resume", scopeSelect.value ? [scopeSelect.value] : undefined)),
      ),
      h(
        "fieldset",
        {},
        h("legend", { text: "Reset offsets (Empty group only)" }),
        h("label", { for: "reset-to" }, "To", resetTo),
        h("label", { for: "reset-value" }, "Timestamp / offset", resetValue),
        h("label", { for: "reset-topics" }, "Topics (t or t:0,2)", resetTopics),
        previewButton,
        applyButton,
      ),
    ),
    preview,
  );

  const members = h("div", { id: "members" });
  const lag = h("div", { id: "lag" });
  const timeline = h("div", { id: "timeline" });
  app.replaceChildren(
    summary,
    actions,
    h("section", { "aria-labelledby": "members-h" }, h("h2", { id: "members-h", text: "Members" }), members),
    h("section", { "aria-labelledby": "lag-h" }, h("h2", { id: "lag-h", text: "Lag" }), lag),
    h("section", { "aria-labelledby": "timeline-h" }, h("h2", { id: "timeline-h", text: "Rebalance timeline" }), timeline),
  );

  function setTopics(topics) {
    const current = scopeSelect.value;
    const wanted = ["", ...topics];
    const have = [...scopeSelect.options].map((o) => o.value);
    if (have.join("\n") === wanted.join("\n")) return;
    scopeSelect.replaceChildren(
      h("option", { value: "", text: "the whole group" }),
      ...topics.map((t) => h("option", { value: t, text: `topic ${t}` })),
    );
    scopeSelect.value = wanted.includes(current) ? current : "";
  }

  return async () => {
    let group;
    try {
      group = (await api("GET", base)).data;
    } catch (err) {
      if (err instanceof ApiFailure && err.status === 404) {
        summary.replaceChildren(h("p", { text: `Group ${groupId} does not exist (or no longer exists).` }));
        return;
      }
      throw err;
    }
    const [history, tl] = await Promise.all([api("GET", `${base}/lag-history`), api("GET", `${base}/timeline?limit=50`)]);
    const now = Date.now();
    const topics = [...new Set([...group.offsets.map((o) => o.topic), ...group.members.flatMap((m) => (m.assignment || []).map((a) => a.topic)), ...((group.paused && group.paused.topics) || [])])].sort();
    setTopics(topics);

    summary.replaceChildren(
      summaryList([
        ["State", stateBadge(group.state), { id: "group-state" }],
        ["Type / protocol", [group.protocol_type || "—", group.protocol].filter(Boolean).join(" / ")],
        ["Generation", fmt(group.generation)],
        ["Members", fmt(group.members.length)],
        ["Lag", fmt(group.lag), { id: "group-lag" }],
        ["Paused", h("span", { class: group.paused && (group.paused.group || group.paused.topics.length) ? "paused" : null, text: pausedText(group.paused && (group.paused.group || group.paused.topics.length) ? group.paused : null) }), { id: "group-paused" }],
        ["Last rebalance", group.last_rebalance ? `${group.last_rebalance.reason} at ${clock(group.last_rebalance.started_at_ms)}` : "—"],
      ]),
    );

    members.replaceChildren(
      group.members.length
        ? simpleTable(
            "Members",
            ["Member", "Client id", "Host", "Instance id", "Assignment", "Session / rebalance timeout"],
            group.members.map((m) => [
              h("span", { class: "mono", text: m.member_id + (m.leader ? " (leader)" : "") }),
              m.client_id,
              m.client_host,
              m.group_instance_id || "—",
              m.assignment === null ? "—" : m.assignment.map((a) => `${a.topic}: ${a.partitions.join(",")}`).join("; ") || "none",
              `${fmtMs(m.session_timeout_ms)} / ${fmtMs(m.rebalance_timeout_ms)}`,
            ]),
          )
        : h("p", { class: "muted", text: "No members." }),
    );

    const chart = lagChart(history.data.partitions, history.data.sample_interval_ms);
    lag.replaceChildren(
      chart.svg,
      chart.legend,
      simpleTable(
        "Lag per partition",
        ["Topic", "Partition", "Committed", "Log end", "Lag", "Lag (time)", "Owner"],
        group.offsets.map((o) => [o.topic, fmt(o.partition), fmt(o.committed_offset), fmt(o.log_end_offset), fmt(o.lag), fmtSeconds(o.lag_seconds), o.client_id ? `${o.client_id} (${o.client_host})` : "—"]),
        [1, 2, 3, 4, 5],
      ),
    );

    const rebalances = tl.data.rebalances;
    timeline.replaceChildren(
      timelineChart(rebalances, now),
      simpleTable(
        "Rebalances",
        ["Generation", "Reason", "Client's reason", "Started", "Duration", "Outcome", "Came in", "Went out (why)"],
        [...rebalances].reverse().map((r) => [
          `${r.from_generation} → ${r.generation ?? "…"}`,
          h("span", { class: "reason", text: r.reason }),
          r.client_reason || "—",
          clock(r.started_at_ms),
          r.duration_ms !== null ? fmtMs(r.duration_ms) : `${fmtMs(r.elapsed_ms)} so far`,
          r.outcome,
          r.members_in.map(memberName).join(", ") || "—",
          r.members_out.map((m) => `${memberName(m)} (${m.cause || "gone"})`).join(", ") || "—",
        ]),
      ),
    );
  };
}

// -- the coordinator page ---------------------------------------------------------------------------------------

function coordinatorPage() {
  const previous = new Map(); // worker/api -> [time ms, count]
  return async () => {
    const { data } = await api("GET", "/v1/coordinator");
    const now = Date.now();
    const cards = data.workers.map((w) => {
      if (w.error) return h("section", { class: "panel" }, h("h2", { text: `Worker ${w.worker}` }), h("p", { class: "paused", text: w.error }));
      const notActive = w.shards.filter((sh) => sh.state !== "active");
      const requests = w.requests.map((r) => {
        const key = `${w.worker}/${r.api}`;
        const before = previous.get(key);
        previous.set(key, [now, r.count]);
        const rate = before && now > before[0] ? ((r.count - before[1]) * 1000) / (now - before[0]) : null;
        return [r.api, fmt(r.count), rate === null ? "…" : rate.toFixed(1), fmt(r.errors), r.mean_ms === null ? "—" : r.mean_ms.toFixed(2), r.p99_ms === null ? "—" : `≤ ${r.p99_ms}`];
      });
      return h(
        "section",
        { class: "panel worker", "data-worker": w.worker, "aria-labelledby": `worker-${w.worker}` },
        h("h2", { id: `worker-${w.worker}`, text: `Worker ${w.worker}${data.workers.length === 1 ? " (the only one)" : ""}` }),
        summaryList([
          ["Ready", w.ready ? "yes" : "no"],
          ["Data plane", w.data_plane === "embedded" ? "embedded (no upstream cluster)" : w.data_plane || "none"],
          ["Connections", fmt(w.connections)],
          ["Groups", fmt(w.groups)],
          ["Shards", `${fmt(w.shards.length)} (${notActive.length ? `${notActive.length} not active` : "all active"})`],
          ["Uptime", fmtSeconds(w.uptime_s)],
          ["Process", `pid ${w.pid}`],
        ]),
        h("h3", { text: "Shards" }),
        h(
          "ul",
          { class: "shards", "aria-label": `Shards of worker ${w.worker}` },
          w.shards.map((sh) => h("li", { class: `shard-${sh.state}`, title: `shard ${sh.index}: ${sh.state}, ${sh.groups ?? "?"} groups`, "data-shard": sh.index }, `${sh.index}`, h("br"), h("small", { text: sh.state === "active" ? `${sh.groups} g` : sh.state }))),
        ),
        h("h3", { text: "Requests" }),
        simpleTable("Requests by API", ["API", "Answered", "Per second", "Errors", "Mean ms", "p99 ms"], requests, [1, 2, 3, 4, 5]),
        h("h3", { text: "Group log" }),
        summaryList([
          ["Segments", fmt(w.log.segments)],
          ["Bytes", fmt(w.log.total_bytes)],
          ["Entries", fmt(w.log.entries)],
          ["Appends since start", fmt(w.log.appends)],
          ["fsyncs since start", fmt(w.log.flushes)],
          ["Failed fsyncs", fmt(w.log.failed_flushes)],
          ["Compactions", fmt(w.log.compactions)],
          ["Loaded in", w.load.seconds === undefined ? "—" : fmtSeconds(w.load.seconds)],
        ]),
      );
    });
    app.replaceChildren(
      h("p", { class: "muted", text: `${data.workers.length} worker${data.workers.length === 1 ? "" : "s"} on this machine; each serves its own shards. Rates are the change since the previous refresh.` }),
      h("div", { class: "workers" }, cards),
    );
  };
}

// -- start --------------------------------------------------------------------------------------------------------

const page = body.dataset.page;
if (page === "groups") refreshFn = groupsPage();
else if (page === "group") refreshFn = groupPage(body.dataset.group);
else if (page === "coordinator") refreshFn = coordinatorPage();
refresh();
