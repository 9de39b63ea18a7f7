// The scrapy-redis dashboard: polls /api/status, keeps the history for the plots (in the
// page: a reload starts it afresh), draws them on <canvas>, posts the actions.
// No library, no build step: the page works offline. Every text from Redis goes through
// textContent (never innerHTML).
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const INTERVAL = 1000 * parseFloat(document.querySelector('meta[name="refresh-interval"]').content);
const WINDOW = 300; // seconds of history on the plots
const RATE_SPAN = Math.max(3, (2 * INTERVAL) / 1000);
const crawls = new Map(); // spider -> {section, history: [{t, queued, leased, start, pages, items, pps, ips}]}

function stat(status, name) {
  const value = (status.stats || {})[name];
  return typeof value === "number" ? value : 0;
}

function show(value) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number" && !Number.isInteger(value)) return value.toFixed(1);
  return String(value);
}

function setField(section, name, value) {
  const cell = section.querySelector(`[data-field="${name}"]`);
  cell.textContent = show(value);
  cell.parentElement.classList.toggle("nonzero", typeof value === "number" && value > 0);
}

function sectionFor(spider) {
  let crawl = crawls.get(spider);
  if (!crawl) {
    const section = document.getElementById("crawl").content.firstElementChild.cloneNode(true);
    section.dataset.spider = spider;
    section.querySelector(".name").textContent = spider;
    wireActions(section, spider);
    crawl = { section, history: [], alive: 0 };
    crawls.set(spider, crawl);
  }
  return crawl;
}

function record(history, status, time) {
  const point = {
    t: time, queued: status.queued, leased: status.leased, start: status.start_pending,
    pages: stat(status, "response_received_count"), items: stat(status, "item_scraped_count"),
  };
  // Rates over the last RATE_SPAN seconds: workers write their stats every second or so.
  const base = history.find((earlier) => earlier.t >= time - RATE_SPAN) || history[history.length - 1];
  const elapsed = base ? point.t - base.t : 0;
  point.pps = elapsed > 0 ? Math.max(0, point.pages - base.pages) / elapsed : null;
  point.ips = elapsed > 0 ? Math.max(0, point.items - base.items) / elapsed : null;
  history.push(point);
  while (history.length && history[0].t < time - WINDOW) history.shift();
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  return seconds < 120 ? `${seconds.toFixed(1)} s` : `${(seconds / 60).toFixed(1)} min`;
}

function fillWorkers(section, workers) {
  const body = section.querySelector("table.workers tbody");
  body.replaceChildren(...workers.map((worker) => {
    const row = document.createElement("tr");
    row.dataset.worker = worker.id;
    row.classList.toggle("dead", !worker.alive);
    const cells = [worker.id, worker.alive ? "yes" : "no", age(worker.heartbeat_age),
      worker.leased, worker.start_leased, show(worker.pages_per_second), show(worker.items_per_second)];
    for (const text of cells) {
      const cell = document.createElement("td");
      cell.textContent = String(text);
      row.append(cell);
    }
    return row;
  }));
}

// The busiest download slots of a crawl queued per slot (SCHEDULER_FLEET_LIMITS).
function fillSlots(section, slots) {
  const table = section.querySelector("table.slots");
  table.hidden = slots.length === 0;
  table.querySelector("tbody").replaceChildren(...slots.map((slot) => {
    const row = document.createElement("tr");
    const slowed = [slot.retry_after_for > 0 ? `Retry-After (${slot.retry_after_for.toFixed(0)} s)` : "",
      slot.autothrottle ? "AutoThrottle" : ""].filter(Boolean).join(", ") || "–";
    const cells = [slot.slot, slot.queued, slot.in_flight, slot.concurrency || "–", slot.starts,
      `${(slot.rate || 0).toFixed(2)}/s`, `${slot.delay} s`, age(slot.next_start_in), slowed];
    for (const text of cells) {
      const cell = document.createElement("td");
      cell.textContent = String(text);
      row.append(cell);
    }
    return row;
  }));
}

// Requests due later and fingerprints that expire (DUPEFILTER_LIFETIME), when there are.
function fillLater(section, status) {
  const due = status.due_later || { count: 0 };
  const expiring = status.expiring;
  section.querySelector(".tiles.later").hidden = !due.count && !expiring;
  setField(section, "due_later", due.count);
  setField(section, "due_next", due.count ? (due.due_now ? "now" : age(due.next_due_in)) : null);
  setField(section, "fingerprints_alive", expiring ? expiring.alive : null);
  setField(section, "fingerprints_expiring", expiring ? expiring.expiring_soon : null);
}

function fillKeys(section, keys) {
  const select = section.querySelector("form.push select");
  if (select.dataset.keys === keys.join("\n")) return;
  select.dataset.keys = keys.join("\n");
  select.replaceChildren(...keys.map((key) => new Option(key, key)));
  section.querySelector("form.push").hidden = keys.length === 0;
}

function active(status) {
  return status.workers.length > 0 || status.queued > 0 || status.leased > 0
    || status.start_pending > 0 || stat(status, "response_received_count") > 0;
}

function render(status, time) {
  const crawl = sectionFor(status.spider);
  const section = crawl.section;
  section.classList.toggle("idle", !active(status));
  record(crawl.history, status, time);
  section.querySelector(".queue").textContent = `${status.queue_class} ${status.queue_key}`;
  showDiagnosis(section.querySelector(".diagnosis"), status.diagnosis || "");
  for (const name of ["queued", "leased", "start_pending", "start_leased", "fingerprints",
    "items", "invalid", "start_invalid", "dead_letters"]) {
    setField(section, name, status[name]);
  }
  setField(section, "pages", stat(status, "response_received_count"));
  setField(section, "items_scraped", stat(status, "item_scraped_count"));
  crawl.alive = status.workers.filter((worker) => worker.alive).length;
  setField(section, "workers_alive", crawl.alive);
  section.querySelector("form.purge button").textContent = crawl.alive
    ? `Purge the queue (${crawl.alive} worker(s) alive)…` : "Purge the queue…";
  fillWorkers(section, status.workers);
  fillSlots(section, status.slots || []);
  fillLater(section, status);
  fillKeys(section, status.start_keys);
  showRecurring(section, status);
  return section;
}

// Recurring start messages (scrapy redis push --every): how many, and when the next is due.
function showRecurring(section, status) {
  setField(section, "recurring", status.recurring || 0);
  const next = (status.recurring_next || [])[0];
  const due = next && next.next_run !== null ? Math.round(next.next_run - status.read_at) : null;
  setField(section, "recurring_next", due === null ? null : due <= 0 ? "due now" : `in ${due}s`);
}

// The plots of a crawl, drawn once its section is in the page (they take its width).
function drawCharts(spider, now) {
  const crawl = crawls.get(spider);
  draw(crawl.section.querySelector(".chart-queue"), crawl.history, now, [
    ["queued", "#1f6feb"], ["leased", "#f0a020"], ["start", "#2e7d32"]]);
  draw(crawl.section.querySelector(".chart-rates"), crawl.history, now, [
    ["pps", "#1f6feb", "pages/s"], ["ips", "#b3261e", "items/s"]]);
}

// The diagnosis marks setting names and commands with `backticks`: shown as code.
function showDiagnosis(element, text) {
  element.hidden = !text;
  if (element.dataset.text === text) return;
  element.dataset.text = text;
  element.replaceChildren(...text.split("`").map((part, index) => {
    if (index % 2 === 0) return document.createTextNode(part);
    const code = document.createElement("code");
    code.textContent = part;
    return code;
  }));
}

function niceMax(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

function draw(canvas, history, now, series) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || canvas.width, height = canvas.clientHeight || canvas.height;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const left = 44, right = 8, top = 18, bottom = 18;
  const values = history.flatMap((point) => series.map(([name]) => point[name] ?? 0));
  const max = niceMax(Math.max(0, ...values));
  // The history so far, from 30 s to WINDOW: a short crawl fills the plot too.
  const span = Math.min(WINDOW, Math.max(30, now - (history.length ? history[0].t : now)));
  const x = (t) => left + (width - left - right) * (1 - (now - t) / span);
  const y = (v) => top + (height - top - bottom) * (1 - v / max);
  ctx.font = "11px system-ui, sans-serif";
  ctx.strokeStyle = "#d9dde5";
  ctx.fillStyle = "#6a7385";
  for (const fraction of [0, 0.5, 1]) {
    ctx.beginPath();
    ctx.moveTo(left, y(max * fraction));
    ctx.lineTo(width - right, y(max * fraction));
    ctx.stroke();
    ctx.fillText(show(max * fraction), 4, y(max * fraction) + 4);
  }
  ctx.fillText(span < 120 ? `-${Math.round(span)} s` : `-${(span / 60).toFixed(1)} min`, left, height - 4);
  ctx.fillText("now", width - right - 22, height - 4);
  series.forEach(([name, color, label], index) => {
    ctx.strokeStyle = ctx.fillStyle = color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let started = false;
    for (const point of history) {
      if (point[name] === null || point[name] === undefined) continue;
      if (started) ctx.lineTo(x(point.t), y(point[name]));
      else ctx.moveTo(x(point.t), y(point[name]));
      started = true;
    }
    ctx.stroke();
    ctx.fillText(label || name, left + 8 + index * 70, 12);
  });
}

function problem(text) {
  document.getElementById("problem").textContent = text;
}

// The read the page shows: its number (the server reads once for every viewer, so
// the same read may come twice), its age and how long it took.
let shownRead = 0;

function showRead(read, time) {
  const when = time ? `updated ${new Date(time * 1000).toLocaleTimeString()}, ` : "";
  const took = read.took >= 0.1 ? ` (read in ${read.took.toFixed(1)} s)` : "";
  document.getElementById("updated").textContent = `${when}${read.age.toFixed(1)} s old${took}`;
}

async function readCrawls() {
  try {
    const response = await fetch("/api/status", { credentials: "same-origin" });
    const data = await response.json();
    if (data.read) showRead(data.read, response.ok ? data.time : null);
    if (!response.ok) throw new Error(data.error || response.statusText);
    problem("");
    if (data.read.number === shownRead) return;
    shownRead = data.read.number;
    const main = document.getElementById("crawls");
    // Crawls with something in Redis first, then the project's other spiders.
    const crawlsFirst = data.crawls.slice().sort(
      (a, b) => active(b) - active(a) || a.spider.localeCompare(b.spider));
    const sections = crawlsFirst.map((status) => render(status, data.time));
    if (!sections.length) {
      const empty = document.createElement("p");
      empty.className = "empty";
      empty.textContent = "No spider in this project.";
      sections.push(empty);
    }
    if (sections.some((section, n) => main.children[n] !== section) || main.children.length !== sections.length) {
      main.replaceChildren(...sections);
    }
    for (const status of crawlsFirst) drawCharts(status.spider, data.time);
  } catch (error) {
    problem(error.message.startsWith("Cannot read") ? error.message : `Cannot read the crawls: ${error.message}`);
  }
}

// One read at a time: a refresh asked while one runs gets that one.
let reading = null;

function refresh() {
  if (!reading) reading = readCrawls().finally(() => { reading = null; });
  return reading;
}

// The next refresh starts INTERVAL after the previous one ended, however long it took.
async function poll() {
  await refresh();
  setTimeout(poll, INTERVAL);
}

// Post an action; its result, or null (the error is shown, and given to `failed`).
async function act(section, action, body, failed = () => {}) {
  const result = section.querySelector(".action-result");
  result.classList.remove("failed");
  result.textContent = `${action}…`;
  try {
    const response = await fetch(`/api/actions/${action}`, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": CSRF },
      body: JSON.stringify(body),
    });
    const data = await response.json();
    if (!response.ok) throw new Error(data.error || response.statusText);
    result.textContent = describe(action, data);
    refresh();
    return data;
  } catch (error) {
    result.classList.add("failed");
    result.textContent = `${action} failed: ${error.message}`;
    failed(error.message);
    return null;
  }
}

function describe(action, data) {
  if (action === "push") return `Pushed ${data.pushed} message(s) to ${data.key}.`;
  if (action === "requeue") return `Requeued ${data.requeued}, dead-lettered ${data.dead_lettered}.`;
  return `Purged about ${data.purged} request(s) of ${data.spider}.`;
}

function wireActions(section, spider) {
  section.querySelector("form.push").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const messages = form.messages.value.split("\n").filter((line) => line.trim());
    if (await act(section, "push", { spider, key: form.key.value, messages })) form.messages.value = "";
  });
  section.querySelector("form.requeue").addEventListener("submit", (event) => {
    event.preventDefault();
    act(section, "requeue", { spider, dead_letters: event.target.dead_letters.checked });
  });
  section.querySelector("form.purge").addEventListener("submit", (event) => {
    event.preventDefault();
    purge(section, spider);
  });
}

// The server refuses to purge while workers of the crawl are alive, unless forced: the
// question says how many the page saw, and forces the purge if the user accepts it.
async function purge(section, spider) {
  const alive = crawls.get(spider).alive;
  const workers = alive ? ` ${alive} worker(s) of it are alive: what they push next mixes`
    + " with a crawl half deleted (stop them first)." : "";
  const question = `Delete every queued and leased request of ${spider}?${workers} This cannot be undone.`;
  const result = section.querySelector(".action-result");
  if (!window.confirm(question)) {
    cancelled(result);
    return;
  }
  let refusal = "";
  const body = { spider, confirm: spider, force: alive > 0 };
  if (await act(section, "purge", body, (message) => { refusal = message; })) return;
  // A worker started since the page last looked: the server said so. Ask again.
  if (!body.force && refusal.includes('"force": true')) {
    if (window.confirm(`${refusal}\n\nPurge anyway, while they run?`)) act(section, "purge", { ...body, force: true });
    else cancelled(result);
  }
}

// A dismissed question: the result of an earlier action no longer shows.
function cancelled(result) {
  result.classList.remove("failed");
  result.textContent = "Purge cancelled: nothing was deleted.";
}

async function logout() {
  await fetch("/logout", { method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": CSRF } });
  window.location.assign("/login");
}

document.getElementById("logout").addEventListener("click", logout);
poll();
